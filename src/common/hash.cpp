#include "common/hash.hpp"

#include <algorithm>
#include <cstring>

namespace finegemm {

namespace {

// Lane seeds and per-word round constants: arbitrary odd constants (hex digits of pi and e).
constexpr uint64_t kLane0Seed = 0x243f6a8885a308d3ull;
constexpr uint64_t kLane1Seed = 0x13198a2e03707344ull;
constexpr uint64_t kLane0Round = 0xb7e151628aed2a6bull;
constexpr uint64_t kLane1Round = 0x9e3779b97f4a7c15ull;

uint64_t rotl(uint64_t x, int r) { return (x << r) | (x >> (64 - r)); }

// Two different bijective 64-bit mixers (xorshift-multiply chains with full avalanche), one per lane.
uint64_t mix_a(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ull;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebull;
  x ^= x >> 31;
  return x;
}

uint64_t mix_b(uint64_t x) {
  x ^= x >> 33;
  x *= 0xff51afd7ed558ccdull;
  x ^= x >> 33;
  x *= 0xc4ceb9fe1a85ec53ull;
  x ^= x >> 33;
  return x;
}

uint64_t load_le64(const unsigned char* p) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

void store_le64(unsigned char* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<unsigned char>(v >> (8 * i));
}

}  // namespace

Hasher::Hasher() : lane0_(kLane0Seed), lane1_(kLane1Seed) {}

void Hasher::absorb(uint64_t word) {
  // Each step is a bijection of the lane for a fixed word and of the word for a fixed lane; the round constants keep
  // the all-zero state from being a fixed point.
  lane0_ = mix_a((lane0_ ^ word) + kLane0Round);
  lane1_ = mix_b((lane1_ + rotl(word, 31)) ^ kLane1Round);
}

Hasher& Hasher::update(const void* data, size_t size) {
  const auto* bytes = static_cast<const unsigned char*>(data);
  total_bytes_ += size;
  // Top up a partial word left by the previous call.
  if (tail_size_ > 0) {
    const size_t take = std::min(size, sizeof(tail_) - tail_size_);
    std::memcpy(tail_ + tail_size_, bytes, take);
    tail_size_ += take;
    bytes += take;
    size -= take;
    if (tail_size_ < sizeof(tail_)) return *this;
    absorb(load_le64(tail_));
    tail_size_ = 0;
  }
  for (; size >= 8; bytes += 8, size -= 8) absorb(load_le64(bytes));
  std::memcpy(tail_, bytes, size);
  tail_size_ = size;
  return *this;
}

Hasher& Hasher::update(std::string_view s) {
  update_u64(s.size());
  return update(s.data(), s.size());
}

Hasher& Hasher::update_u64(uint64_t value) {
  unsigned char bytes[8];
  store_le64(bytes, value);
  return update(bytes, sizeof(bytes));
}

std::array<uint64_t, 2> Hasher::digest() const {
  Hasher h = *this;
  // The zero-padded tail word, then the total length (so that trailing zero bytes change the digest).
  unsigned char last[8] = {};
  std::memcpy(last, h.tail_, h.tail_size_);
  h.absorb(load_le64(last));
  h.absorb(total_bytes_);
  // Cross-mix the lanes so that every output bit depends on both.
  uint64_t a = mix_a(h.lane0_ ^ rotl(h.lane1_, 23));
  uint64_t b = mix_b(h.lane1_ + a);
  a = mix_a(a + b);
  return {a, b};
}

std::string Hasher::hex() const {
  static constexpr char kDigits[] = "0123456789abcdef";
  const auto [low, high] = digest();
  std::string out(32, '0');
  for (int i = 0; i < 16; ++i) {
    out[i] = kDigits[(high >> (60 - 4 * i)) & 0xf];
    out[16 + i] = kDigits[(low >> (60 - 4 * i)) & 0xf];
  }
  return out;
}

std::string hash_hex(std::string_view data) { return Hasher().update(data.data(), data.size()).hex(); }

}  // namespace finegemm

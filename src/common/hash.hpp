// A 128-bit non-cryptographic content hash, used to address cached kernels.
//
// Two independent 64-bit lanes absorb the input as little-endian 8-byte words, each through its own bijective
// multiply-xorshift mixer; the finalizer absorbs the tail and the total length, then cross-mixes the lanes. The result
// is the same on every machine (byte order is fixed), so cache keys survive copying a cache directory elsewhere.
// Not suitable against an adversary: it only guards against accidental collisions and corruption.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace finegemm {

/// Streaming 128-bit hash. `update` calls concatenate: update(a, n); update(b, m) hashes the same as one update of the
/// n + m bytes. `update(std::string_view)` is length-prefixed, so a sequence of strings hashes unambiguously.
class Hasher {
 public:
  Hasher();

  /// Absorbs `size` raw bytes.
  Hasher& update(const void* data, size_t size);
  /// Absorbs the length of `s` (as 8 bytes) and then its bytes: update("ab").update("c") != update("a").update("bc").
  Hasher& update(std::string_view s);
  /// Absorbs an integer as 8 little-endian bytes.
  Hasher& update_u64(uint64_t value);

  /// The 128-bit digest {low, high} of everything absorbed so far; the hasher stays usable.
  std::array<uint64_t, 2> digest() const;
  /// The digest as 32 lowercase hex characters (high lane first).
  std::string hex() const;

 private:
  void absorb(uint64_t word);

  uint64_t lane0_;
  uint64_t lane1_;
  uint64_t total_bytes_ = 0;
  unsigned char tail_[8] = {};
  size_t tail_size_ = 0;
};

/// The hex digest of raw `data` (not length-prefixed): Hasher().update(data.data(), data.size()).hex().
std::string hash_hex(std::string_view data);

}  // namespace finegemm

#include "jit/embedded_headers.hpp"

#include "common/hash.hpp"

namespace finegemm::jit {

HeaderSet::HeaderSet(std::vector<EmbeddedHeader> embedded) : headers(std::move(embedded)) {
  Hasher hasher;
  for (const auto& h : headers) hasher.update(std::string_view(h.path)).update(h.content, h.size);
  hash = hasher.hex();
}

}  // namespace finegemm::jit

#include "heuristics/quantizer_launch.hpp"

#include <algorithm>

namespace finegemm::heuristics {

int quantizer_spread_smem_bytes(int64_t grid, bool pdl, int num_sms, const SmSharedMemory& sm, int static_smem) {
  if (!pdl || grid < 1 || grid > num_sms / kQuantizerSpreadMaxSmShare || sm.per_sm <= 0) return 0;
  // Two CTAs fit when 2 (dynamic + static + reserved) <= per_sm: one byte past half of it (in 16-byte units, the
  // allocation granule) keeps a second out.
  const int half = sm.per_sm / 2 - static_smem - sm.reserved_per_cta;
  return std::max(16, (half / 16 + 1) * 16);
}

}  // namespace finegemm::heuristics

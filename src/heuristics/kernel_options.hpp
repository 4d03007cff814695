// What the chosen tiles' kernel is launched with besides its tiles: its grid, the L2 hints on B's loads and D's
// stores, B's stages filled in pairs, B prefetched under programmatic dependent launch, D prefetched before the
// reductions into it. Internal to the heuristic (select_config sets them once it has the tiles).
#pragma once

#include "heuristics/heuristics.hpp"

namespace finegemm::heuristics {

/// Sets those fields of `chosen` for `kp`, the problem as the chosen kernel computes it (kernel_problem); a field
/// that `constraints` names (FINEGEMM_FORCE_CONFIG) is taken from there.
void set_launch_options(KernelConfig& chosen, const Problem& kp, const ConfigConstraints& constraints,
                        const HardwareModel& hw);

}  // namespace finegemm::heuristics

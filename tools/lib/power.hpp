// The card's energy counter and clocks, read through NVML (libnvidia-ml, loaded at run time so that nothing links
// against it): what the bench's and the microbenchmarks' power figures come from.
#pragma once

#include <cuda_runtime_api.h>

#include <functional>
#include <string>

namespace finegemm::tools {

/// One GPU's NVML handle. NVML's total-energy counter (millijoules since the driver loaded) is updated by the driver
/// every few tens of milliseconds, so energy over an interval is only meaningful for intervals of about a second or
/// more; callers measure long runs and divide.
class PowerMeter {
 public:
  /// Opens NVML for the CUDA device `cuda_device` (matched by PCI bus id). Never throws: when NVML or the device
  /// cannot be opened, available() is false and why() says why.
  explicit PowerMeter(int cuda_device);
  ~PowerMeter();
  PowerMeter(const PowerMeter&) = delete;
  PowerMeter& operator=(const PowerMeter&) = delete;

  bool available() const { return device_ != nullptr; }
  const std::string& why() const { return why_; }

  /// The energy counter in millijoules; -1 when unavailable or on an NVML error.
  double energy_mj() const;
  /// The SM clock now, MHz; -1 when unavailable.
  int sm_clock_mhz() const;
  /// The enforced power limit, watts; -1 when unavailable.
  double power_limit_w() const;
  /// The clock-event reasons now (NVML's bit mask: 0x4 software power cap, 0x8 hardware slowdown, 0x20 software
  /// thermal, ...); 0 when unavailable.
  unsigned long long clock_event_reasons() const;

 private:
  /// An NVML function of the opened device, or null when unavailable.
  void* entry(const char* name) const;

  void* lib_ = nullptr;
  void* device_ = nullptr;
  bool initialized_ = false;  // nvmlInit succeeded: shut down in the destructor
  std::string why_;
};

/// Names the set bits of an NVML clock-event mask ("power cap", "hw slowdown", ...; "none" for 0).
std::string describe_clock_event_reasons(unsigned long long reasons);

/// A sustained run: the call repeated back to back (no L2 flush, no host gaps: the calls are replayed from a CUDA
/// graph) for about `seconds`, as a server's steady load runs it; at the card's power cap this is slower than the
/// bench's 30 flushed calls.
struct SustainedRun {
  int calls = 0;
  double us_per_call = 0;   // wall time of the run / calls
  double watts = 0;         // average board power over the run (0 when NVML is unavailable)
  double mj_per_call = 0;   // energy per call
  int sm_clock_mhz = -1;    // sampled half-way through the run
  unsigned long long clock_event_reasons = 0;  // sampled with the clock
};

/// Captures `enqueue` (one call on the given stream, capturable) into a CUDA graph of about 20 ms of calls
/// (`call_us` is the expected duration of one call) and replays the graph for about `seconds`. Throws
/// std::runtime_error on CUDA errors.
SustainedRun run_sustained(const std::function<void(cudaStream_t)>& enqueue, cudaStream_t s, double call_us,
                           double seconds, const PowerMeter& meter);

}  // namespace finegemm::tools

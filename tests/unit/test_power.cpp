// The bench's power helpers that run without a GPU: naming NVML's clock-event bits, and a PowerMeter that cannot
// open NVML (no driver on CI) failing soft, with the reason. (The sustained run itself needs a GPU: Gpu tests.)
#include <gtest/gtest.h>

#include "../../tools/lib/power.hpp"

namespace ft = finegemm::tools;

TEST(Power, ClockEventReasonsAreNamed) {
  EXPECT_EQ(ft::describe_clock_event_reasons(0), "none");
  EXPECT_EQ(ft::describe_clock_event_reasons(0x4), "power cap");
  EXPECT_EQ(ft::describe_clock_event_reasons(0x4 | 0x8), "power cap,hw slowdown");
  EXPECT_EQ(ft::describe_clock_event_reasons(0x1 | 0x20 | 0x40), "idle,sw thermal,hw thermal");
  EXPECT_EQ(ft::describe_clock_event_reasons(1ull << 40), "none");  // bits NVML may add later are not named
}

TEST(Power, MeterReportsWhyWhenNvmlIsUnavailable) {
  ft::PowerMeter meter(0);
  if (meter.available()) {
    // A host with a driver: the counters read.
    EXPECT_GE(meter.energy_mj(), 0.0);
    EXPECT_GT(meter.power_limit_w(), 0.0);
    return;
  }
  EXPECT_FALSE(meter.why().empty());
  EXPECT_EQ(meter.energy_mj(), -1.0);
  EXPECT_EQ(meter.sm_clock_mhz(), -1);
  EXPECT_EQ(meter.power_limit_w(), -1.0);
  EXPECT_EQ(meter.clock_event_reasons(), 0u);
}

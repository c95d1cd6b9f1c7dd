// The compute-share control law against a simulated GPU: one kernel at a time, first come first
// served across tenants, so that greedy tenants left alone split the GPU in proportion to their
// kernels' lengths (the failure mode a fixed-cost token bucket leaves in place).
#include "vgpu/share_controller.h"

#include <gtest/gtest.h>

#include <vector>

namespace cnlab::vgpu {
namespace {

constexpr uint64_t kPeriodNs = 100'000'000;
constexpr double kPeriodS = 0.1;

struct SimTenant {
  double share;
  double kernel_s;     // GPU time of one kernel
  bool greedy = true;  // always has work queued; otherwise wants `demand` of the GPU
  double demand = 0;
  bool hard = false;
  uint64_t interval_ns = 0;
  double busy = 0;
  uint64_t launches = 0;
};

// One period on the GPU: paced tenants launch at most their rate, the rest of the GPU goes to the
// unpaced greedy tenants kernel by kernel (in proportion to their kernels' lengths).
void run_period(std::vector<SimTenant>& tenants) {
  double used = 0;
  std::vector<double> served(tenants.size(), 0);
  for (size_t i = 0; i < tenants.size(); ++i) {
    SimTenant& t = tenants[i];
    double want = t.greedy ? 1.0 : t.demand;
    if (t.interval_ns) want = std::min(want, 1e9 / t.interval_ns * kPeriodS * t.kernel_s / kPeriodS);
    if (t.interval_ns || !t.greedy) served[i] = want;
  }
  for (double s : served) used += s;
  if (used > 1) {
    for (double& s : served) s /= used;
    used = 1;
  }
  double greedy_weight = 0;
  for (size_t i = 0; i < tenants.size(); ++i) {
    if (tenants[i].greedy && !tenants[i].interval_ns) greedy_weight += tenants[i].kernel_s;
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    SimTenant& t = tenants[i];
    if (t.greedy && !t.interval_ns) served[i] = (1 - used) * t.kernel_s / greedy_weight;
    t.busy = served[i];
    t.launches = static_cast<uint64_t>(served[i] * kPeriodS / t.kernel_s + 0.5);
  }
}

// What the library would measure: a greedy tenant is always waiting for the GPU, in synchronize
// calls (its kernels queue behind the others') or held by its pace; one limited by its own demand
// waits only for its own kernels.
void control(std::vector<SimTenant>& tenants) {
  std::vector<ShareInput> in;
  for (const SimTenant& t : tenants) {
    ShareInput i{t.share, t.hard, t.busy, t.launches, t.interval_ns};
    if (t.greedy && t.interval_ns) i.paced = 1 - t.busy;
    i.waiting = t.greedy && !t.interval_ns ? 1.0 : t.busy;
    in.push_back(i);
  }
  std::vector<uint64_t> out(in.size());
  next_intervals(in.data(), in.size(), kPeriodNs, out.data());
  for (size_t i = 0; i < tenants.size(); ++i) tenants[i].interval_ns = out[i];
}

// Runs `periods` periods and returns each tenant's mean busy fraction over the last 10.
std::vector<double> settle(std::vector<SimTenant>& tenants, int periods) {
  std::vector<double> mean(tenants.size(), 0);
  for (int p = 0; p < periods; ++p) {
    run_period(tenants);
    if (p >= periods - 10) {
      for (size_t i = 0; i < tenants.size(); ++i) mean[i] += tenants[i].busy / 10;
    }
    control(tenants);
  }
  return mean;
}

TEST(ShareController, TwoGreedyTenantsAt30And70GetTheirShares) {
  std::vector<SimTenant> tenants = {{0.3, 200e-6}, {0.7, 200e-6}};
  auto busy = settle(tenants, 40);
  EXPECT_NEAR(busy[0], 0.30, 0.02);
  EXPECT_NEAR(busy[1], 0.70, 0.02);
}

TEST(ShareController, LongKernelsDoNotBuyMoreThanTheShare) {
  // Left alone, the 10x longer kernels would take 10/11 of the GPU.
  std::vector<SimTenant> tenants = {{0.5, 2e-3}, {0.5, 200e-6}};
  run_period(tenants);
  EXPECT_GT(tenants[0].busy, 0.85);
  auto busy = settle(tenants, 40);
  EXPECT_NEAR(busy[0], 0.50, 0.02);
  EXPECT_NEAR(busy[1], 0.50, 0.02);
}

TEST(ShareController, ShortKernelsAtASmallShareConvergeToo) {
  std::vector<SimTenant> tenants = {{0.1, 20e-6}, {0.9, 5e-3}};
  auto busy = settle(tenants, 60);
  EXPECT_NEAR(busy[0], 0.10, 0.02);
  EXPECT_NEAR(busy[1], 0.90, 0.02);
}

TEST(ShareController, ALoneTenantIsNotHeldBack) {
  std::vector<SimTenant> tenants = {{0.3, 200e-6}, {0.7, 200e-6}};
  settle(tenants, 30);
  ASSERT_NE(tenants[0].interval_ns, 0u);  // paced while the other was busy
  tenants[1].greedy = false;               // the other stops
  tenants[1].demand = 0;
  auto busy = settle(tenants, 30);
  EXPECT_GT(busy[0], 0.97);
  EXPECT_EQ(tenants[0].interval_ns, 0u);
}

TEST(ShareController, AHardShareHoldsEvenOnAnIdleGpu) {
  std::vector<SimTenant> tenants = {{0.3, 200e-6}};
  tenants[0].hard = true;
  auto busy = settle(tenants, 40);
  EXPECT_NEAR(busy[0], 0.30, 0.02);
}

TEST(ShareController, IdleSharesGoToTheBusyInProportion) {
  // Three tenants at 20/30/50; the 50% one is idle: the others split the GPU 40/60.
  std::vector<SimTenant> tenants = {{0.2, 300e-6}, {0.3, 100e-6}, {0.5, 100e-6}};
  tenants[2].greedy = false;
  auto busy = settle(tenants, 60);
  EXPECT_NEAR(busy[0], 0.40, 0.03);
  EXPECT_NEAR(busy[1], 0.60, 0.03);
}

TEST(ShareController, ATenantUsingLessThanItsShareIsNeverPaced) {
  std::vector<SimTenant> tenants = {{0.5, 100e-6}, {0.5, 100e-6}};
  tenants[0].greedy = false;
  tenants[0].demand = 0.2;
  settle(tenants, 40);
  EXPECT_EQ(tenants[0].interval_ns, 0u);
  EXPECT_NEAR(tenants[0].busy, 0.2, 0.01);
  EXPECT_NEAR(tenants[1].busy, 0.8, 0.05);
}

TEST(ShareController, HundredOneBlockTenantsEachGetOnePercent) {
  std::vector<SimTenant> tenants;
  for (int i = 0; i < 100; ++i) tenants.push_back({0.01, (50 + 10 * (i % 7)) * 1e-6});
  auto busy = settle(tenants, 80);
  for (double b : busy) EXPECT_NEAR(b, 0.01, 0.003);
}

}  // namespace
}  // namespace cnlab::vgpu

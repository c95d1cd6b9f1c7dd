#include "vgpu/share_controller.h"

namespace cnlab::vgpu {
namespace {

// Within this of the target, leave the pace alone: 3% of the target (so that a 1% tenant is held
// to a tenth of a point, not a whole one) and never less than a tenth of a point.
double tolerance(double target) { return 0.03 * target + 0.001; }
constexpr double kMaxStep = 2.0;       // at most halve or double a rate per period
constexpr double kRelaxStep = 1.25;    // unsaturated: let paced tenants 25% faster per period
constexpr double kUnpaceHeadroom = 4;  // unpace once the allowance is this many times the use

double clamp(double v, double lo, double hi) { return v < lo ? lo : v > hi ? hi : v; }

uint64_t interval_for(double rate_per_s) {
  if (rate_per_s <= 0) return 1'000'000'000ull;  // at most one launch a second: never a full stop
  double ns = 1e9 / rate_per_s;
  return ns < 1 ? 1 : static_cast<uint64_t>(ns);
}

// Work-conserving targets: a tenant that does not want more than it gets (no queueing for the GPU,
// no pacing holding it back) keeps what it uses when that is under its share; what it leaves goes
// to the others in proportion to their shares, round after round (water-filling). A hard share's
// target is the share itself.
void water_fill(const ShareInput* tenants, size_t count, double* targets) {
  constexpr size_t kMax = 512;
  bool fixed[kMax] = {};
  double capacity = 1.0;
  for (bool changed = true; changed;) {
    changed = false;
    double shares = 0;
    for (size_t i = 0; i < count && i < kMax; ++i) {
      if (tenants[i].launches > 0 && !fixed[i] && !tenants[i].hard) shares += tenants[i].share;
    }
    for (size_t i = 0; i < count && i < kMax; ++i) {
      const ShareInput& t = tenants[i];
      if (t.launches == 0 || fixed[i] || t.hard) continue;
      double fair = shares > 0 ? capacity * t.share / shares : t.share;
      if (!wants_more(t) && t.busy < fair) {
        fixed[i] = true;
        targets[i] = t.busy;
        capacity -= t.busy;
        changed = true;
      } else {
        targets[i] = fair;
      }
    }
  }
  for (size_t i = 0; i < count && i < kMax; ++i) {
    if (tenants[i].hard) targets[i] = tenants[i].share;
  }
}

}  // namespace

bool wants_more(const ShareInput& t) {
  return t.hard || t.paced > kWantsMore || t.waiting - t.busy > kWantsMore;
}

void next_intervals(const ShareInput* tenants, size_t count, uint64_t period_ns, uint64_t* intervals) {
  const double period_s = period_ns > 0 ? static_cast<double>(period_ns) / 1e9 : 1.0;
  double total_busy = 0;
  for (size_t i = 0; i < count; ++i) total_busy += tenants[i].busy;
  const bool saturated = total_busy >= kSaturated;
  const bool roomy = total_busy < kRoomy;
  double targets[512] = {};
  water_fill(tenants, count, targets);
  for (size_t i = 0; i < count; ++i) {
    const ShareInput& t = tenants[i];
    uint64_t& out = intervals[i];
    out = t.interval_ns;
    if (t.launches == 0) {
      out = 0;  // idle: nothing to pace; it starts afresh when it launches again
      continue;
    }
    const double target = i < 512 ? targets[i] : t.share;
    const double used_rate = static_cast<double>(t.launches) / period_s;
    const double allowed_rate = t.interval_ns ? 1e9 / static_cast<double>(t.interval_ns) : 0;
    // GPU time per launch, as measured: a pace letting it launch more than the whole GPU can run
    // holds nothing back, and is dropped.
    const double launch_s = t.busy > 0 ? t.busy * period_s / static_cast<double>(t.launches) : 0;
    auto faster_or_free = [&](double rate) -> uint64_t {
      bool moot = rate >= used_rate * kUnpaceHeadroom || (launch_s > 0 && rate * launch_s >= 1.0);
      return !t.hard && moot ? 0 : interval_for(rate);
    };
    if (!saturated && !t.hard) {
      if (roomy && t.interval_ns != 0) out = faster_or_free(allowed_rate * kRelaxStep);
      continue;
    }
    if (t.busy > target + tolerance(target)) {
      // Too much of the GPU: from what it launched, scaled to the target.
      double base = t.interval_ns ? (used_rate < allowed_rate ? used_rate : allowed_rate) : used_rate;
      double step = clamp(target / (t.busy > 0 ? t.busy : target), 1 / kMaxStep, 1.0);
      out = interval_for(base * step);
    } else if (t.busy < target - tolerance(target) && t.interval_ns) {
      double step = t.busy > 0 ? clamp(target / t.busy, 1.0, kMaxStep) : kMaxStep;
      out = faster_or_free(allowed_rate * step);
    } else if (t.interval_ns && !t.hard && launch_s > 0 && allowed_rate * launch_s >= 1.0) {
      out = 0;  // a pace that allows the whole GPU holds nothing back
    }
  }
}

}  // namespace cnlab::vgpu

// Decayed GPU usage per project and per user, in block-seconds: what fair share is computed from.
#pragma once

#include <map>
#include <string>
#include <utility>

#include "common/time.h"

namespace cnlab::sched {

// Usage decays exponentially: a block-second recorded one half-life ago counts half. Values are
// stored with the time they were last brought up to date and decayed lazily when read.
class UsageLedger {
 public:
  explicit UsageLedger(Duration half_life = 7 * kDay) : half_life_(half_life) {}

  Duration half_life() const { return half_life_; }
  // Adds `block_seconds` of usage by `user` of `project`, as of time `at`.
  void add(const std::string& project, const std::string& user, double block_seconds, Time at);
  // Decayed usage as of `now` (never increases with time alone).
  double project_usage(const std::string& project, Time now) const;
  double user_usage(const std::string& project, const std::string& user, Time now) const;

 private:
  double decayed(const std::pair<double, Time>& entry, Time now) const;
  void add_to(std::pair<double, Time>& entry, double amount, Time at) const;

  Duration half_life_;
  std::map<std::string, std::pair<double, Time>> projects_;
  std::map<std::pair<std::string, std::string>, std::pair<double, Time>> users_;
};

}  // namespace cnlab::sched

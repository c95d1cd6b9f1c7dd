#include "sched/usage_ledger.h"

#include <cmath>

namespace cnlab::sched {

double UsageLedger::decayed(const std::pair<double, Time>& entry, Time now) const {
  double age = static_cast<double>((now - entry.second).count());
  if (age <= 0) return entry.first;
  return entry.first * std::exp2(-age / static_cast<double>(half_life_.count()));
}

void UsageLedger::add_to(std::pair<double, Time>& entry, double amount, Time at) const {
  if (at >= entry.second) {
    entry = {decayed(entry, at) + amount, at};
  } else {
    // Late report: decay the amount forward to the entry's time instead of moving the entry back.
    double age = static_cast<double>((entry.second - at).count());
    entry.first += amount * std::exp2(-age / static_cast<double>(half_life_.count()));
  }
}

void UsageLedger::add(const std::string& project, const std::string& user, double block_seconds, Time at) {
  auto [p, new_project] = projects_.try_emplace(project, 0.0, at);
  add_to(p->second, block_seconds, at);
  auto [u, new_user] = users_.try_emplace({project, user}, 0.0, at);
  add_to(u->second, block_seconds, at);
}

double UsageLedger::project_usage(const std::string& project, Time now) const {
  auto it = projects_.find(project);
  return it == projects_.end() ? 0.0 : decayed(it->second, now);
}

double UsageLedger::user_usage(const std::string& project, const std::string& user, Time now) const {
  auto it = users_.find({project, user});
  return it == users_.end() ? 0.0 : decayed(it->second, now);
}

}  // namespace cnlab::sched

// Reclaiming idle slices: a running job whose GPU slice has seen no use (no kernel launch, no copy,
// as its node's agent reports through the interception library) for longer than its priority
// class allows is stopped, with an IdleReclaimed event and an audit record, so that a notebook left
// open overnight gives its GPU back. Classes without a limit (by default production and inference)
// are never reclaimed; nor are jobs on simulated GPUs, where no use can be seen.
#pragma once

#include <map>
#include <mutex>
#include <string>

#include "server/object_cache.h"
#include "server/periodic.h"
#include "store/store.h"

namespace cnlab::server {

class IdleReclaim {
 public:
  // `limits`: priority class -> how long its slices may stay idle.
  IdleReclaim(store::Store& store, ObjectCache& cache, std::map<std::string, Duration> limits, std::function<Time()> clock);
  ~IdleReclaim();
  void start(std::chrono::milliseconds period = std::chrono::seconds(10));
  void stop();
  // One pass now; returns the jobs it reclaimed.
  std::vector<std::string> check_once();

 private:
  store::Store& store_;
  ObjectCache& cache_;
  std::map<std::string, Duration> limits_;
  std::function<Time()> clock_;
  Periodic periodic_;
};

// Parses "--idle-reclaim dev=2h,opportunistic=30m" ("none": no class is reclaimed); also the grammar
// of --checkpoint-every (`flag`). Errors name the flag, the part and the allowed classes.
Result<std::map<std::string, Duration>> parse_idle_limits(std::string_view text,
                                                         std::string_view flag = "--idle-reclaim");

}  // namespace cnlab::server

#include "sim/replay_policy.h"

#include <fmt/format.h>

#include "sim/policies/cnlab_replay_policy.h"
#include "sim/policies/fifo_replay_policy.h"

namespace cnlab::sim {

const std::vector<std::string>& replay_policy_keys() {
  static const std::vector<std::string> keys = {"fifo", "cnlab"};
  return keys;
}

Result<std::unique_ptr<ReplayPolicy>> make_replay_policy(std::string_view key) {
  std::string k = to_lower(trim(key));
  if (k == "fifo") return std::unique_ptr<ReplayPolicy>(std::make_unique<FifoReplayPolicy>());
  if (k == "cnlab") return std::unique_ptr<ReplayPolicy>(std::make_unique<CnlabReplayPolicy>());
  return Error::invalid_argument("--policies", std::string(key),
                                 fmt::format("unknown replay policy; valid: {}", join(replay_policy_keys(), ",")));
}

}  // namespace cnlab::sim

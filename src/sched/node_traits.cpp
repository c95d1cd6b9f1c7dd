#include "sched/node_traits.h"

#include <vector>

namespace cnlab::sched {

NodeTraits traits_of(const model::Node& node) {
  NodeTraits traits = node.gpu_checkpoint ? kRestoresGpuState : 0;
  if (node.simulated) {
    traits |= kSimulatedGpus;
  } else if (!node.gpus.empty()) {
    traits |= kRealGpus;
  }
  if (!node.peer_address.empty()) traits |= kTakesMigrations;
  return traits;
}

NodeTraits traits_to_move(const model::Job& job, const model::Node& source) {
  if (job.spec.gpu.kind == model::SliceKind::kNone) return kTakesMigrations;
  return kTakesMigrations | kRestoresGpuState | (source.simulated ? kSimulatedGpus : kRealGpus);
}

NodeTraits traits_to_resume(const model::Job& job) {
  const std::optional<model::CheckpointRef>& checkpoint = job.status.checkpoint;
  if (!checkpoint || checkpoint->kind != "process" || checkpoint->gpus.empty()) return 0;
  NodeTraits traits = checkpoint->gpus == "simulated" ? kSimulatedGpus : kRealGpus;
  if (checkpoint->gpu_state) traits |= kRestoresGpuState;
  return traits;
}

std::string describe_traits(NodeTraits traits) {
  std::vector<std::string> parts;
  if (traits & kSimulatedGpus) parts.push_back("simulated GPUs");
  if (traits & kRealGpus) parts.push_back("real GPUs");
  if (traits & kRestoresGpuState) parts.push_back("NVIDIA's cuda-checkpoint");
  if (traits & kTakesMigrations) parts.push_back("an agent that takes live migrations");
  std::string text;
  for (size_t i = 0; i < parts.size(); ++i) text += (i == 0 ? "" : i + 1 == parts.size() ? " and " : ", ") + parts[i];
  return text;
}

}  // namespace cnlab::sched

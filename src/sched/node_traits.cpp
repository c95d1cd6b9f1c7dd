#include "sched/node_traits.h"

namespace cnlab::sched {

NodeTraits traits_of(const model::Node& node) {
  NodeTraits traits = node.gpu_checkpoint ? kRestoresGpuState : 0;
  if (node.simulated) {
    traits |= kSimulatedGpus;
  } else if (!node.gpus.empty()) {
    traits |= kRealGpus;
  }
  return traits;
}

NodeTraits traits_to_resume(const model::Job& job) {
  const std::optional<model::CheckpointRef>& checkpoint = job.status.checkpoint;
  if (!checkpoint || checkpoint->kind != "process" || checkpoint->gpus.empty()) return 0;
  NodeTraits traits = checkpoint->gpus == "simulated" ? kSimulatedGpus : kRealGpus;
  if (checkpoint->gpu_state) traits |= kRestoresGpuState;
  return traits;
}

std::string describe_traits(NodeTraits traits) {
  std::string gpus = (traits & kSimulatedGpus) ? "simulated GPUs" : (traits & kRealGpus) ? "real GPUs" : "";
  if (!(traits & kRestoresGpuState)) return gpus;
  return (gpus.empty() ? "" : gpus + " and ") + "NVIDIA's cuda-checkpoint";
}

}  // namespace cnlab::sched

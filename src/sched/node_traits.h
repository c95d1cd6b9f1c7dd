// What a node offers besides capacity that some jobs need: a job resuming a process checkpoint
// taken while it held GPUs needs GPUs of the kind it was dumped on, and, where its dump holds GPU
// state, an agent with NVIDIA's cuda-checkpoint to resume it; a job moving live needs an agent
// that takes migrations, and one holding GPUs also those two. Private to src/sched.
#pragma once

#include <cstdint>
#include <string>

#include "model/model.h"

namespace cnlab::sched {

using NodeTraits = uint8_t;
inline constexpr NodeTraits kRestoresGpuState = 1;  // model::Node::gpu_checkpoint
inline constexpr NodeTraits kSimulatedGpus = 2;
inline constexpr NodeTraits kRealGpus = 4;
inline constexpr NodeTraits kTakesMigrations = 8;  // its agent reported a peer endpoint (model::Node::peer_address)
inline constexpr int kTraitSets = 16;  // every combination of the above

NodeTraits traits_of(const model::Node& node);

inline bool has_traits(NodeTraits node, NodeTraits wanted) { return (node & wanted) == wanted; }

// What a pending job needs of the nodes it starts on to resume its latest checkpoint, as the agent
// that took it recorded (model::CheckpointRef): nothing unless it is a process checkpoint of a job
// holding GPUs.
NodeTraits traits_to_resume(const model::Job& job);

// What a running job moving live off `source` needs of its target: an agent that takes
// migrations, and for a job holding GPUs, GPU state restored onto GPUs of the kind it holds (the
// server carries out no other move: server/migrations.h).
NodeTraits traits_to_move(const model::Job& job, const model::Node& source);

// "real GPUs and NVIDIA's cuda-checkpoint": what the traits ask of a node.
std::string describe_traits(NodeTraits traits);

}  // namespace cnlab::sched

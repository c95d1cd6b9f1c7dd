#include "sched/explain.h"

#include <fmt/format.h>

#include <algorithm>

namespace cnlab::sched {
namespace {

std::string cores(int64_t milli) {
  if (milli % 1000 == 0) return fmt::format("{} CPU cores", milli / 1000);
  return fmt::format("{:.1f} CPU cores", static_cast<double>(milli) / 1000);
}

std::string host_part(const JobShape& shape) {
  if (shape.cpu_milli == 0 && shape.memory_mib == 0) return "";
  return fmt::format(" with {} and {} memory", cores(shape.cpu_milli), model::format_memory_mib(std::max<int64_t>(shape.memory_mib, 0)));
}

// Largest value of `metric` over the models the shape allows.
template <typename Metric>
int best_over_models(const ClusterState& state, model::ModelMask models, Metric metric) {
  int best = 0;
  for (int m = 0; m < model::kMaxModels; ++m) {
    auto id = static_cast<model::ModelId>(m);
    if (state.total_gpus(id) > 0 && model::mask_allows(models, id)) best = std::max(best, metric(id));
  }
  return best;
}

std::string describe_request(const JobShape& shape) {
  std::string models = model::format_model_mask(shape.models);
  switch (shape.kind) {
    case model::SliceKind::kBlocks: {
      std::string vram = shape.vram_mib >= 0 ? fmt::format(" ({} VRAM)", model::format_memory_mib(shape.vram_mib)) : "";
      return fmt::format("{} blocks of {}{}{}", shape.blocks, models, vram, host_part(shape));
    }
    case model::SliceKind::kWhole:
      return fmt::format("{} whole {}{}", shape.gpu_count, models, host_part(shape));
    case model::SliceKind::kMig:
      return fmt::format("a {} instance of {}{}", model::gpu_model(shape.mig_model()).mig_profiles[shape.mig_profile].name,
                         models, host_part(shape));
    case model::SliceKind::kNone:
      return fmt::format("no GPU{}", host_part(shape));
  }
  return models;
}

}  // namespace

std::string describe_shape(const JobShape& shape) {
  if (shape.node_traits == 0) return describe_request(shape);
  return describe_request(shape) + " on a node with " + describe_traits(shape.node_traits) + " (to resume its checkpoint)";
}

std::string why_no_fit(const ClusterState& state, const Calendar& calendar, const Snapshot& snapshot,
                       const JobShape& shape, Time now, Time end) {
  std::string needs = "needs " + describe_shape(shape);
  if (shape.node_traits != 0) {
    // The capacity below is the whole cluster's; what counts here is that of the nodes it may use.
    int able = 0;
    for (uint32_t n = 0; n < state.node_count(); ++n) {
      able += state.node(n).schedulable && has_traits(state.node(n).traits, shape.node_traits) ? 1 : 0;
    }
    if (able == 0) return needs + "; no schedulable node has them now";
    return fmt::format("{}; none of the {} schedulable nodes that have them has that free now", needs, able);
  }
  std::string models = model::format_model_mask(shape.models);
  // Capacity that fits the GPUs but is held by a reservation, or lacks host resources.
  auto held_or_host = [&](uint32_t node, std::span<const PartUse> uses) -> std::string {
    const NodeState& n = state.node(node);
    if (n.cpu_free < shape.cpu_milli || n.mem_free < shape.memory_mib) return "host";
    if (const Hold* h = calendar.blocking_hold(node, now, end, shape.cpu_milli, shape.memory_mib, uses)) {
      return fmt::format("; the capacity that fits is reserved for job {} from {}", snapshot.jobs[h->job].meta.name,
                         format_time_near(h->start, now));
    }
    return "";
  };
  switch (shape.kind) {
    case model::SliceKind::kNone:
      for (uint32_t n = 0; n < state.node_count(); ++n) {
        if (!state.node(n).schedulable) continue;
        std::string why = held_or_host(n, {});
        if (why != "host" && !why.empty()) return needs + why;
      }
      return needs + "; no node has that CPU and memory free";
    case model::SliceKind::kBlocks: {
      int largest = best_over_models(state, shape.models, [&](model::ModelId m) { return state.largest_free_blocks(m); });
      if (largest < shape.blocks) return fmt::format("{}; largest free on any {} is {} blocks", needs, models, largest);
      for (int m = 0; m < model::kMaxModels; ++m) {
        auto id = static_cast<model::ModelId>(m);
        if (!model::mask_allows(shape.models, id)) continue;
        for (int b = shape.blocks; b <= model::kBlocksPerGpu; ++b) {
          const IndexSet& bucket = state.bucket(id, b);
          for (uint32_t p = bucket.first(); p != IndexSet::kEnd; p = bucket.next(p + 1)) {
            const PartitionState& part = state.partition(p);
            int64_t mem = shape.vram_mib >= 0 ? shape.vram_mib : state.default_mem(part, shape.blocks);
            if (part.free_mem < mem) continue;
            PartUse use{p, static_cast<int16_t>(shape.blocks), mem};
            std::string why = held_or_host(part.node, {&use, 1});
            if (why != "host" && !why.empty()) return needs + why;
          }
        }
      }
      if (shape.vram_mib >= 0) {
        return fmt::format("{}; no {} with {} free blocks has that much VRAM free", needs, models, shape.blocks);
      }
      return fmt::format("{}; every {} with {} free blocks sits on a node without that CPU and memory free", needs,
                         models, shape.blocks);
    }
    case model::SliceKind::kWhole: {
      int most = best_over_models(state, shape.models, [&](model::ModelId m) { return state.most_whole_free(m); });
      int per_node = best_over_models(state, shape.models, [&](model::ModelId m) { return state.max_gpus_per_node(m); });
      if (shape.gpu_count <= per_node) {
        if (most < shape.gpu_count) {
          return fmt::format("{} on one node; the most free whole {} on one node is {}", needs, models, most);
        }
        for (int m = 0; m < model::kMaxModels; ++m) {
          auto id = static_cast<model::ModelId>(m);
          if (!model::mask_allows(shape.models, id)) continue;
          for (int count = shape.gpu_count; count < ClusterState::kWholeBuckets; ++count) {
            const IndexSet& bucket = state.whole_bucket(id, count);
            for (uint32_t e = bucket.first(); e != IndexSet::kEnd; e = bucket.next(e + 1)) {
              uint32_t node = state.whole_entry_node(e);
              std::vector<PartUse> uses;
              for (uint32_t g = state.node(node).gpu_begin; g < state.node(node).gpu_end; ++g) {
                const GpuState& gpu = state.gpu(g);
                if (gpu.model == id && gpu.whole != kNone && state.partition(gpu.whole).empty() &&
                    static_cast<int>(uses.size()) < shape.gpu_count) {
                  uses.push_back({gpu.whole, model::kBlocksPerGpu, state.partition(gpu.whole).total_mem});
                }
              }
              std::string why = held_or_host(node, uses);
              if (why != "host" && !why.empty()) return needs + " on one node" + why;
            }
          }
        }
        return fmt::format("{} on one node; the nodes with {} free whole {} lack that CPU and memory",
                           needs, shape.gpu_count, models);
      }
      int total = best_over_models(state, shape.models, [&](model::ModelId m) {
        int sum = 0;
        for (int count = 1; count < ClusterState::kWholeBuckets; ++count) {
          const IndexSet& bucket = state.whole_bucket(m, count);
          for (uint32_t e = bucket.first(); e != IndexSet::kEnd; e = bucket.next(e + 1)) {
            sum += state.whole_free(state.whole_entry_node(e), m);
          }
        }
        return sum;
      });
      return fmt::format("{} across nodes; {} whole {} are free in all", needs, total, models);
    }
    case model::SliceKind::kMig: {
      const auto& profile = model::gpu_model(shape.mig_model()).mig_profiles[shape.mig_profile];
      int free_instances = 0, free_slots = 0;
      for (uint32_t g : state.mig_gpus_of(shape.mig_model())) {
        const MigGpu& mig = state.mig_gpu(state.gpu(g).mig);
        free_slots += mig.layout.first_fit(shape.mig_profile) >= 0 ? 1 : 0;
        for (uint32_t p : mig.partitions) {
          const PartitionState& part = state.partition(p);
          free_instances += part.mig_profile == shape.mig_profile && part.empty() ? 1 : 0;
        }
      }
      int idle = state.most_whole_free(shape.mig_model());
      return fmt::format("{}; free {} instances: {}, MIG GPUs with room for one: {}, idle whole {} to repartition: {}",
                         needs, profile.name, free_instances, free_slots, model::format_model_mask(shape.models),
                         idle > 0 ? "yes" : "none");
    }
  }
  return needs;
}

std::string never_fits(const ClusterState& state, const std::vector<model::Node>& nodes, const JobShape& shape,
                       bool span_nodes) {
  std::string models = model::format_model_mask(shape.models);
  int total = best_over_models(state, shape.models, [&](model::ModelId m) { return state.total_gpus(m); });
  if (total == 0 && shape.kind != model::SliceKind::kNone) return fmt::format("can never fit: the cluster has no {} GPU", models);
  if (shape.kind == model::SliceKind::kWhole && shape.gpu_count > total) {
    return fmt::format("can never fit: needs {} whole {} and the cluster has {}", shape.gpu_count, models, total);
  }
  int64_t cpu_per_node = shape.cpu_milli, mem_per_node = shape.memory_mib;
  if (shape.kind == model::SliceKind::kWhole) {
    int per_node = best_over_models(state, shape.models, [&](model::ModelId m) { return state.max_gpus_per_node(m); });
    if (shape.gpu_count > per_node && !span_nodes) {
      return fmt::format("can never fit: no node has {} {} GPUs, and gangs may not span nodes", shape.gpu_count, models);
    }
    if (shape.gpu_count > per_node) {
      cpu_per_node = shape.cpu_milli * per_node / shape.gpu_count;
      mem_per_node = shape.memory_mib * per_node / shape.gpu_count;
    }
  }
  bool host_ok = false;
  for (uint32_t n = 0; n < nodes.size() && !host_ok; ++n) {
    host_ok = state.node(n).cpu_total >= cpu_per_node && state.node(n).mem_total >= mem_per_node;
  }
  if (!host_ok) return fmt::format("can never fit: no node has {} and {} memory", cores(cpu_per_node),
                                   model::format_memory_mib(std::max<int64_t>(mem_per_node, 1)));
  return "";
}

}  // namespace cnlab::sched

#include "sched/workload_profile.h"

#include <algorithm>
#include <tuple>

namespace cnlab::sched {
namespace {

auto key(const JobShape& s) {
  return std::tuple(static_cast<int>(s.kind), s.models, s.blocks, s.gpu_count, s.mig_profile, s.vram_mib, s.cpu_milli);
}

}  // namespace

bool WorkloadProfile::before(const Entry& a, const Entry& b) {
  return a.count != b.count ? a.count > b.count : key(a.shape) < key(b.shape);
}

void WorkloadProfile::add(const JobShape& shape, uint64_t jobs) {
  JobShape k = shape;
  k.memory_mib = 0;
  k.node_traits = 0;  // what the workload asks of capacity, wherever it may go
  auto [it, added] = index_.try_emplace(k, entries_.size());
  if (added) entries_.push_back({k, 0});
  entries_[it->second].count += jobs;
  entries_[it->second].memory_mib += static_cast<double>(shape.memory_mib) * static_cast<double>(jobs);
  total_ += jobs;
  if (shape.total_blocks() > 0) {
    cpu_of_gpu_jobs_ += static_cast<double>(shape.cpu_milli) * static_cast<double>(jobs);
    memory_of_gpu_jobs_ += static_cast<double>(shape.memory_mib) * static_cast<double>(jobs);
    gpu_blocks_ += static_cast<double>(shape.total_blocks()) * static_cast<double>(jobs);
  }
  dirty_ = true;
}

const std::vector<TypicalShape>& WorkloadProfile::typical() const {
  if (!dirty_) return typical_;
  dirty_ = false;
  std::vector<Entry> ranked = entries_;
  std::sort(ranked.begin(), ranked.end(), before);
  std::vector<TypicalShape> next;
  uint64_t covered = 0;
  for (const Entry& e : ranked) {
    if (static_cast<double>(covered) >= kCoverage * static_cast<double>(total_) || next.size() == kMaxTypical) break;
    next.push_back({e.shape, static_cast<double>(e.count),
                    e.memory_mib > 0 ? static_cast<double>(e.count) / e.memory_mib : 0.0});
    covered += e.count;
  }
  for (auto& t : next) t.weight /= static_cast<double>(covered);
  std::sort(next.begin(), next.end(), [](const auto& a, const auto& b) { return key(a.shape) < key(b.shape); });
  bool same_set =
      next.size() == typical_.size() && std::equal(next.begin(), next.end(), typical_.begin(),
                                                   [](const auto& a, const auto& b) { return a.shape == b.shape; });
  if (!same_set) ++version_;
  typical_ = std::move(next);
  return typical_;
}

}  // namespace cnlab::sched

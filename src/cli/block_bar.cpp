#include "cli/block_bar.h"

#include <algorithm>
#include <map>
#include <unordered_map>

namespace cnlab::cli {

std::vector<Holding> holdings_of(const Json& job) {
  std::vector<Holding> out;
  const Json* placement = nullptr;
  if (job.contains("status") && job["status"].is_object() && job["status"].contains("placement")) {
    placement = &job["status"]["placement"];
  }
  if (!placement || !placement->is_array()) return out;
  std::string id;
  if (job.contains("metadata") && job["metadata"].is_object()) id = job["metadata"].value("name", "");
  for (const Json& node : *placement) {
    if (!node.is_object() || !node.contains("gpus") || !node["gpus"].is_array()) continue;
    std::string name = node.value("node", "");
    for (const Json& g : node["gpus"]) {
      if (!g.is_object()) continue;
      out.push_back({id, name, g.value("index", 0), g.value("blocks", 0), g.value("mig_start", -1)});
    }
  }
  return out;
}

const GpuBlocks* BlockMap::find(std::string_view node, int gpu) const {
  auto it = std::lower_bound(gpus.begin(), gpus.end(), std::pair{node, gpu}, [](const GpuBlocks& g, const auto& key) {
    return std::pair<std::string_view, int>{g.node, g.gpu} < key;
  });
  if (it == gpus.end() || it->node != node || it->gpu != gpu) return nullptr;
  return &*it;
}

BlockMap build_block_map(const std::vector<Holding>& holdings) {
  BlockMap map;
  std::unordered_map<std::string, int> job_index;
  std::map<std::pair<std::string, int>, std::vector<std::pair<int, const Holding*>>> by_gpu;
  for (const Holding& h : holdings) {
    auto [it, added] = job_index.try_emplace(h.job, static_cast<int>(map.jobs.size()));
    if (added) map.jobs.push_back(h.job);
    by_gpu[{h.node, h.gpu}].push_back({it->second, &h});
  }
  for (auto& [key, list] : by_gpu) {
    GpuBlocks gpu;
    gpu.node = key.first;
    gpu.gpu = key.second;
    gpu.owners.fill(-1);
    // MIG instances first, at their place; then the rest, lowest free block first.
    std::stable_sort(list.begin(), list.end(), [](const auto& a, const auto& b) {
      return (a.second->mig_start >= 0) > (b.second->mig_start >= 0);
    });
    for (const auto& [index, h] : list) {
      int at = h->mig_start >= 0 ? h->mig_start * model::kBlocksPerGpu / model::kMigMemorySlots : 0;
      int left = std::max(0, h->blocks);
      for (int pass = 0; pass < 2 && left > 0; ++pass, at = 0) {  // from its place to the end, then from 0
        for (int b = at; b < model::kBlocksPerGpu && left > 0; ++b) {
          if (gpu.owners[b] != -1) continue;
          gpu.owners[b] = static_cast<int16_t>(index);
          --left;
          ++gpu.held;
        }
      }
      gpu.overflow += left;
    }
    map.gpus.push_back(std::move(gpu));
  }
  return map;  // std::map iterates in (node, gpu) order, so gpus is sorted
}

char job_letter(int i) {
  if (i < 0) return '.';
  if (i < 52) {
    bool upper = (i % 2 == 0) == (i < 26);
    return static_cast<char>((upper ? 'A' : 'a') + i % 26);
  }
  if (i < 62) return static_cast<char>('0' + (i - 52));
  return '*';
}

std::vector<int> bar_cells(const GpuBlocks& gpu, int width) {
  constexpr int n = model::kBlocksPerGpu;
  std::vector<int> cells(width, -1);
  // Per character: the holder with most blocks in its span [c*n/width, (c+1)*n/width).
  std::vector<std::pair<int, int>> counts;  // (job, blocks), few per character
  for (int c = 0; c < width; ++c) {
    counts.clear();
    for (int b = c * n / width; b < (c + 1) * n / width; ++b) {
      int owner = gpu.owners[b];
      if (owner < 0) continue;
      auto it = std::find_if(counts.begin(), counts.end(), [&](const auto& p) { return p.first == owner; });
      if (it == counts.end()) counts.push_back({owner, 1});
      else ++it->second;
    }
    int best = -1, most = 0, held = 0;
    for (const auto& [job, blocks] : counts) {
      held += blocks;
      if (blocks > most) best = job, most = blocks;
    }
    const int span = (c + 1) * n / width - c * n / width;
    cells[c] = 2 * held > span ? best : -1;  // mostly free reads as free
  }
  // Every holder shows at least once: a holder crowded out takes the character where it holds most
  // blocks, among those whose shown holder appears elsewhere too (or is no one).
  std::vector<int> holders;
  for (int b = 0; b < n; ++b) {
    if (gpu.owners[b] >= 0 && std::find(holders.begin(), holders.end(), gpu.owners[b]) == holders.end()) {
      holders.push_back(gpu.owners[b]);
    }
  }
  for (int job : holders) {
    if (std::find(cells.begin(), cells.end(), job) != cells.end()) continue;
    int best = -1, most = 0;
    for (int c = 0; c < width; ++c) {
      int shown = cells[c];
      if (shown >= 0 && std::count(cells.begin(), cells.end(), shown) < 2) continue;
      int mine = 0;
      for (int b = c * n / width; b < (c + 1) * n / width; ++b) mine += gpu.owners[b] == job;
      if (mine > most) best = c, most = mine;
    }
    if (best >= 0) cells[best] = job;
  }
  return cells;
}

std::string bar_text(const std::vector<int>& cells) {
  std::string out = "[";
  for (int job : cells) out += job_letter(job);
  out += ']';
  return out;
}

std::string free_bar(int width) { return "[" + std::string(width, '.') + "]"; }

}  // namespace cnlab::cli

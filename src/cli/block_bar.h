// Who holds each 1% block of each GPU, from the jobs' placements, and the bar `cnlab gpus` draws
// of it: `[AAAAAAAAAAbbbbb.....]`, 20 characters of 5 blocks each, a letter per job. Pure: no I/O,
// no clock.
//
// Blocks of one GPU are interchangeable (a job holds a share, not particular blocks), so the bar
// lays them out for reading: a MIG instance's blocks where the instance sits on the GPU (its first
// memory slot of 8), every other holding in the lowest free blocks, in the order given.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/json_reader.h"
#include "model/gpu_catalog.h"

namespace cnlab::cli {

inline constexpr int kBarWidth = 20;

// A job's blocks on one GPU: one entry of status.placement[].gpus[].
struct Holding {
  std::string job;
  std::string node;
  int gpu = 0;
  int blocks = 0;
  int mig_start = -1;  // the MIG instance's first memory slot (0..7); -1 for none
};

// The holdings in a Job's JSON (status.placement); empty when it has none.
std::vector<Holding> holdings_of(const Json& job);

// One GPU's blocks: owners[b] is the holder of block b, an index into BlockMap::jobs, or -1.
struct GpuBlocks {
  std::string node;
  int gpu = 0;
  std::array<int16_t, model::kBlocksPerGpu> owners;
  int held = 0;      // blocks with an owner
  int overflow = 0;  // blocks asked beyond the 100 there are (a placement the bar cannot show)
};

struct BlockMap {
  std::vector<std::string> jobs;  // in order of first appearance; the index is the letter's
  std::vector<GpuBlocks> gpus;    // sorted by node, then GPU index; only GPUs someone holds

  // The GPU's blocks, or null when no holding names it (all free).
  const GpuBlocks* find(std::string_view node, int gpu) const;
};

BlockMap build_block_map(const std::vector<Holding>& holdings);

// The letter of the job with this index: A b C d ... (alternating case, so that neighbours differ
// at a glance), then a B c D ..., then the digits 0-9; '*' for every job after the 62nd.
char job_letter(int job_index);
// The holder (job index, or -1) each of the `width` characters of the bar shows: when more than
// half its blocks are held, the one holding most of them (the first met on a tie), else free. A job with any
// block on the GPU is shown in at least one character even when it is small beside its neighbours.
std::vector<int> bar_cells(const GpuBlocks& gpu, int width = kBarWidth);
// "[AAAAAAAAAAbbbbb.....]" for those cells.
std::string bar_text(const std::vector<int>& cells);
// An all-free GPU's bar: "[....................]".
std::string free_bar(int width = kBarWidth);

}  // namespace cnlab::cli

// What a job asks of the GPUs, in the grammar users type:
//   h100-25        25 blocks (25%) of one H100
//   h100           one whole H100            h100x8        eight whole H100s, all or nothing
//   h100:3g.40gb   one MIG instance           any-10       10 blocks of any model
//   v100m16|v100m32-50                        either model
//   none           no GPU (host CPU and memory only)
// plus an optional VRAM quota for block slices (`--vram 30Gi`).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "common/result.h"
#include "model/gpu_catalog.h"

namespace cnlab::model {

inline constexpr int kMaxGangGpus = 1024;

enum class SliceKind : uint8_t {
  kBlocks,  // 1..99 blocks of one GPU or MIG instance
  kWhole,   // `gpu_count` whole GPUs
  kMig,     // one MIG instance of `mig_profile`
  kNone,    // no GPU at all: a host-only job (data preparation, CPU inference)
};

struct SliceRequest {
  SliceKind kind = SliceKind::kWhole;
  ModelMask models = 0;  // 0 = any model
  int blocks = kBlocksPerGpu;  // per GPU: 1..99 for kBlocks, 100 for kWhole, the profile's for kMig
  int gpu_count = 1;
  int mig_profile = -1;             // kMig only: index into the single model's profiles
  std::optional<int64_t> vram_mib;  // kBlocks only: a VRAM quota other than the blocks' share

  // The model of a kMig request (exactly one model).
  ModelId mig_model() const;
  const MigProfile& profile() const;
  int total_blocks() const { return kind == SliceKind::kNone ? 0 : blocks * gpu_count; }

  bool operator==(const SliceRequest&) const = default;
};

// Parses the `--gpu` text and the optional `--vram` text (empty = none). Errors name the bad part
// and list what is valid.
Result<SliceRequest> parse_slice(std::string_view gpu, std::string_view vram = {});
// The canonical `--gpu` text: parse_slice(to_string(r), vram_text(r)) == r.
std::string to_string(const SliceRequest& request);
// The canonical `--vram` text, empty when the request has no VRAM quota of its own.
std::string vram_text(const SliceRequest& request);

}  // namespace cnlab::model

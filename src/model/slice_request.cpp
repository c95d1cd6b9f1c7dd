#include "model/slice_request.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"
#include "model/quantity.h"

namespace cnlab::model {
namespace {

constexpr std::string_view kGrammar =
    "expected MODEL-BLOCKS (h100-25), MODEL (h100), MODELxCOUNT (h100x8), MODEL:PROFILE (h100:3g.40gb) or "
    "any-BLOCKS (any-10), or none";

// The longest catalog name that starts `text` and is followed by a separator or the end.
std::optional<ModelId> match_model_prefix(std::string_view text, size_t* length) {
  std::optional<ModelId> best;
  size_t best_length = 0;
  auto models = all_models();
  for (size_t i = 0; i < models.size(); ++i) {
    std::string_view name = models[i].name;
    if (name.size() <= best_length || text.substr(0, name.size()) != name) continue;
    if (name.size() < text.size() && std::string_view("-x:|").find(text[name.size()]) == std::string_view::npos) {
      continue;
    }
    best = static_cast<ModelId>(i);
    best_length = name.size();
  }
  *length = best_length;
  return best;
}

// The token a user probably meant as a model name, for the error message.
std::string_view model_token(std::string_view text) {
  size_t end = text.find_first_of("-:|");
  std::string_view token = text.substr(0, end);
  size_t x = token.rfind('x');
  if (x != std::string_view::npos && x + 1 < token.size() &&
      std::all_of(token.begin() + static_cast<long>(x) + 1, token.end(), [](char c) { return c >= '0' && c <= '9'; })) {
    token = token.substr(0, x);
  }
  return token;
}

Result<int64_t> parse_count(std::string_view digits, std::string_view what, std::string_view gpu) {
  auto n = parse_int(digits, "--gpu");
  if (!n) {
    return Error::invalid_argument("--gpu", std::string(gpu),
                                   fmt::format("{} \"{}\" is not a whole number; {}", what, digits, kGrammar));
  }
  return *n;
}

}  // namespace

ModelId SliceRequest::mig_model() const {
  CNLAB_CHECK(kind == SliceKind::kMig && models != 0 && (models & (models - 1)) == 0);
  return static_cast<ModelId>(__builtin_ctz(models));
}

const MigProfile& SliceRequest::profile() const { return gpu_model(mig_model()).mig_profiles[mig_profile]; }

Result<SliceRequest> parse_slice(std::string_view gpu_text, std::string_view vram) {
  std::string lower = to_lower(trim(gpu_text));
  std::string_view text = lower;
  auto fail = [&](const std::string& why) { return Error::invalid_argument("--gpu", std::string(gpu_text), why); };
  if (text.empty()) return fail(std::string("empty request; ") + std::string(kGrammar));

  if (text == "none") {
    if (!trim(vram).empty()) {
      return Error::invalid_argument("--vram", std::string(vram), "a VRAM quota needs a GPU; the request is none");
    }
    return SliceRequest{SliceKind::kNone, 0, 0, 0, -1, std::nullopt};
  }

  SliceRequest request;
  if (text.substr(0, 3) == "any" && (text.size() == 3 || std::string_view("-x:").find(text[3]) != std::string_view::npos)) {
    text.remove_prefix(3);
  } else {
    while (true) {
      size_t length = 0;
      auto model = match_model_prefix(text, &length);
      if (!model) {
        return fail(fmt::format("unknown GPU model \"{}\"; known models: {}, or any", model_token(text), model_names()));
      }
      request.models |= model_bit(*model);
      text.remove_prefix(length);
      if (text.empty() || text[0] != '|') break;
      text.remove_prefix(1);
    }
  }

  if (text.empty()) {
    request.kind = SliceKind::kWhole;
  } else if (text[0] == '-') {
    auto blocks = parse_count(text.substr(1), "blocks", gpu_text);
    if (!blocks) return blocks.error();
    if (*blocks < 1 || *blocks > kBlocksPerGpu) {
      return fail(fmt::format("blocks must be 1..100 (each is 1% of one GPU), got {}{}", *blocks,
                              *blocks > kBlocksPerGpu ? "; for more than one GPU ask for whole GPUs, e.g. h100x2" : ""));
    }
    request.kind = *blocks == kBlocksPerGpu ? SliceKind::kWhole : SliceKind::kBlocks;
    request.blocks = static_cast<int>(*blocks);
  } else if (text[0] == 'x') {
    auto count = parse_count(text.substr(1), "GPU count", gpu_text);
    if (!count) return count.error();
    if (*count < 1 || *count > kMaxGangGpus) {
      return fail(fmt::format("GPU count must be 1..{}, got {}", kMaxGangGpus, *count));
    }
    request.kind = SliceKind::kWhole;
    request.gpu_count = static_cast<int>(*count);
  } else if (text[0] == ':') {
    if (request.models == 0 || (request.models & (request.models - 1)) != 0) {
      return fail("a MIG profile needs exactly one model, because profiles differ by model (e.g. h100:3g.40gb)");
    }
    request.kind = SliceKind::kMig;
    auto profile = parse_mig_profile(request.mig_model(), text.substr(1), "--gpu");
    if (!profile) return fail(profile.error().message);
    request.mig_profile = *profile;
    request.blocks = request.profile().blocks();
  } else {
    return fail(fmt::format("unexpected \"{}\" after the model; {}", text, kGrammar));
  }

  if (!trim(vram).empty()) {
    auto mib = parse_memory_mib(trim(vram), "--vram");
    if (!mib) return mib.error();
    if (request.kind != SliceKind::kBlocks) {
      return Error::invalid_argument("--vram", std::string(vram),
                                     "a VRAM quota applies to block slices such as h100-25; a whole GPU or a MIG "
                                     "instance comes with its own memory");
    }
    int64_t largest = 0;
    for (size_t i = 0; i < all_models().size(); ++i) {
      if (mask_allows(request.models, static_cast<ModelId>(i))) largest = std::max(largest, all_models()[i].memory_mib);
    }
    if (largest == 0) {
      return Error::invalid_argument("--vram", std::string(vram),
                                     fmt::format("the memory of {} is undisclosed, so a VRAM quota cannot be checked",
                                                 format_model_mask(request.models)));
    }
    if (*mib > largest) {
      return Error::invalid_argument("--vram", std::string(vram),
                                     fmt::format("more than the largest GPU of {} holds ({})",
                                                 format_model_mask(request.models), format_memory_mib(largest)));
    }
    request.vram_mib = *mib;
  }
  return request;
}

std::string to_string(const SliceRequest& request) {
  std::string out = format_model_mask(request.models);
  switch (request.kind) {
    case SliceKind::kBlocks: return fmt::format("{}-{}", out, request.blocks);
    case SliceKind::kWhole: return request.gpu_count == 1 ? out : fmt::format("{}x{}", out, request.gpu_count);
    case SliceKind::kMig: return fmt::format("{}:{}", out, request.profile().name);
    case SliceKind::kNone: return "none";
  }
  return out;
}

std::string vram_text(const SliceRequest& request) {
  return request.vram_mib ? format_memory_mib(*request.vram_mib) : std::string();
}

}  // namespace cnlab::model

#include "agent/gpu/device_names.h"

#include <string>
#include <vector>

#include "common/strings.h"

namespace cnlab::agent {
namespace {

// "NVIDIA A100-SXM4-80GB" -> {"A100", "SXM4", "80GB"}: NVML writes the same product with spaces,
// hyphens, with or without the vendor or brand ("Tesla", "NVIDIA"), depending on the driver.
std::vector<std::string> tokens(std::string_view name) {
  std::vector<std::string> out;
  std::string current;
  for (char c : name) {
    if (c == ' ' || c == '-' || c == '_') {
      if (!current.empty()) out.push_back(std::move(current));
      current.clear();
    } else {
      current += static_cast<char>(c >= 'a' && c <= 'z' ? c - 'a' + 'A' : c);
    }
  }
  if (!current.empty()) out.push_back(std::move(current));
  while (!out.empty() && (out.front() == "NVIDIA" || out.front() == "TESLA")) out.erase(out.begin());
  return out;
}

bool has(const std::vector<std::string>& t, std::string_view token) {
  for (const auto& s : t) {
    if (s == token) return true;
  }
  return false;
}

std::optional<model::ModelId> catalog(std::string_view name) { return model::find_model(name); }

// NVML reports total memory a little under the marketed size (81559 MiB for an 80 GB H100), so the
// sizes are told apart by a threshold between them.
bool larger_than_gib(int64_t memory_mib, int64_t gib) { return memory_mib > gib * 1024; }

}  // namespace

std::optional<model::ModelId> model_for_device_name(std::string_view name, int64_t memory_mib) {
  const std::vector<std::string> t = tokens(name);
  if (t.empty()) return std::nullopt;
  const std::string& family = t[0];

  if (family == "H100") return catalog(has(t, "NVL") ? "h100nvl" : "h100");
  if (family == "H200") return catalog("h200");
  if (family == "A100") {
    bool big = has(t, "80GB") || (!has(t, "40GB") && larger_than_gib(memory_mib, 48));
    return catalog(big ? "a100m80" : "a100m40");
  }
  // A10G (AWS) and A10M differ from the A10 in SM count: not the catalog's a10.
  if (family == "A10" && t.size() == 1) return catalog("a10");
  if (family == "L4" && t.size() == 1) return catalog("l4");
  if (family == "L40S") return catalog("l40s");
  if (family == "T4") return catalog("t4");
  if (family == "P100") return catalog("p100");
  if (family == "V100" || family == "V100S") {
    bool big = has(t, "32GB") || (!has(t, "16GB") && larger_than_gib(memory_mib, 24));
    return catalog(big ? "v100m32" : "v100m16");
  }
  if (family == "RTX" && t.size() >= 3 && t[1] == "6000" && t[2] == "ADA") return catalog("rtx6000ada");
  return std::nullopt;
}

}  // namespace cnlab::agent

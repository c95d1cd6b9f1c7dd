#include "model/job.h"

#include <fmt/format.h>

namespace cnlab::model {
namespace {

constexpr std::pair<JobPhase, std::string_view> kPhases[] = {
    {JobPhase::kPending, "Pending"},     {JobPhase::kRunning, "Running"},     {JobPhase::kSucceeded, "Succeeded"},
    {JobPhase::kFailed, "Failed"},       {JobPhase::kCancelled, "Cancelled"},
};

constexpr int64_t kMaxCpuMilli = 1'000'000'000;
constexpr int64_t kMaxMemoryMib = int64_t{1} << 40;

Json spec_to_json(const JobSpec& spec) {
  Json j = {{"project", spec.project},
            {"user", spec.user},
            {"priority_class", spec.priority_class},
            {"gpu", to_string(spec.gpu)},
            {"cpu_milli", spec.cpu_milli},
            {"memory_mib", spec.memory_mib},
            {"checkpointable", spec.checkpointable}};
  if (spec.gpu.vram_mib) j["vram"] = vram_text(spec.gpu);
  if (spec.deadline) j["deadline"] = format_rfc3339(*spec.deadline);
  if (spec.estimated_duration) j["estimated_duration"] = format_duration(*spec.estimated_duration);
  if (spec.min_runtime) j["min_runtime"] = format_duration(*spec.min_runtime);
  return j;
}

Json status_to_json(const JobStatus& status) {
  Json j = {{"phase", to_string(status.phase)}, {"submitted_at", format_rfc3339(status.submitted_at)}};
  if (status.started_at) j["started_at"] = format_rfc3339(*status.started_at);
  if (status.last_checkpoint_at) j["last_checkpoint_at"] = format_rfc3339(*status.last_checkpoint_at);
  if (!status.placement.empty()) {
    Json nodes = Json::array();
    for (const auto& binding : status.placement) {
      Json gpus = Json::array();
      for (const auto& g : binding.gpus) {
        Json gj = {{"index", g.index}, {"blocks", g.blocks}, {"vram_mib", g.vram_mib}};
        if (g.mig_start >= 0) gj["mig_start"] = g.mig_start;
        gpus.push_back(std::move(gj));
      }
      nodes.push_back({{"node", binding.node}, {"gpus", std::move(gpus)}});
    }
    j["placement"] = std::move(nodes);
  }
  if (!status.message.empty()) j["message"] = status.message;
  return j;
}

JobSpec read_spec(JsonReader& r) {
  r.only({"project", "user", "priority_class", "gpu", "vram", "cpu_milli", "memory_mib", "deadline",
          "estimated_duration", "checkpointable", "min_runtime"});
  JobSpec spec;
  spec.project = r.string("project");
  spec.user = r.string("user");
  for (auto [field, value] : {std::pair{"project", &spec.project}, std::pair{"user", &spec.user}}) {
    if (r.status()) {
      if (auto s = validate_name(*value, r.path_of(field)); !s) r.fail(s.error());
    }
  }
  spec.priority_class = r.string_or("priority_class", spec.priority_class);
  std::string gpu = r.string("gpu");
  std::string vram = r.string_or("vram", "");
  if (r.status()) {
    auto slice = parse_slice(gpu, vram);
    if (!slice) {
      Error e = slice.error();
      e.field = r.path_of(e.field == "--vram" ? "vram" : "gpu");
      r.fail(e);
    } else {
      spec.gpu = *slice;
    }
  }
  spec.cpu_milli = r.integer_or("cpu_milli", 0, 0, kMaxCpuMilli);
  spec.memory_mib = r.integer_or("memory_mib", 0, 0, kMaxMemoryMib);
  spec.deadline = r.time("deadline");
  spec.estimated_duration = r.duration("estimated_duration");
  spec.checkpointable = r.boolean_or("checkpointable", false);
  spec.min_runtime = r.duration("min_runtime");
  if (spec.estimated_duration && spec.estimated_duration->count() <= 0) {
    r.fail(Error::invalid_argument(r.path_of("estimated_duration"), format_duration(*spec.estimated_duration),
                                   "must be longer than 0s"));
  }
  return spec;
}

std::vector<NodeBinding> read_placement(const Json& array, const std::string& path, JsonReader& parent) {
  std::vector<NodeBinding> placement;
  for (size_t i = 0; i < array.size(); ++i) {
    JsonReader node(array[i], fmt::format("{}[{}]", path, i));
    node.only({"node", "gpus"});
    NodeBinding binding{node.string("node"), {}};
    if (const Json* gpus = node.array("gpus")) {
      for (size_t k = 0; k < gpus->size(); ++k) {
        JsonReader g((*gpus)[k], fmt::format("{}[{}].gpus[{}]", path, i, k));
        g.only({"index", "blocks", "vram_mib", "mig_start"});
        GpuBinding gb;
        gb.index = static_cast<int>(g.integer_or("index", 0, 0, 1023));
        gb.blocks = static_cast<int>(g.integer_or("blocks", kBlocksPerGpu, 1, kBlocksPerGpu));
        gb.vram_mib = g.integer_or("vram_mib", 0, 0, kMaxMemoryMib);
        gb.mig_start = static_cast<int>(g.integer_or("mig_start", -1, -1, kMigMemorySlots - 1));
        if (!g.status()) parent.fail(g.status().error());
        binding.gpus.push_back(gb);
      }
    }
    if (!node.status()) parent.fail(node.status().error());
    placement.push_back(std::move(binding));
  }
  return placement;
}

JobStatus read_status(JsonReader& r) {
  r.only({"phase", "submitted_at", "started_at", "last_checkpoint_at", "placement", "message"});
  JobStatus status;
  std::string phase = r.string_or("phase", "Pending");
  bool known = false;
  for (auto [value, name] : kPhases) {
    if (name == phase) {
      status.phase = value;
      known = true;
    }
  }
  if (!known) {
    r.fail(Error::invalid_argument(r.path_of("phase"), phase,
                                   "known phases: Pending, Running, Succeeded, Failed, Cancelled"));
  }
  status.submitted_at = r.time("submitted_at").value_or(Time{});
  status.started_at = r.time("started_at");
  status.last_checkpoint_at = r.time("last_checkpoint_at");
  if (const Json* placement = r.array("placement")) status.placement = read_placement(*placement, r.path_of("placement"), r);
  status.message = r.string_or("message", "");
  if (r.status() && status.phase == JobPhase::kRunning && (status.placement.empty() || !status.started_at)) {
    r.fail(Error::invalid_argument(r.path_of("phase"), phase, "a Running job needs a placement and started_at"));
  }
  return status;
}

}  // namespace

std::string_view to_string(JobPhase phase) {
  for (auto [value, name] : kPhases) {
    if (value == phase) return name;
  }
  return "Unknown";
}

Json to_json(const Job& job) {
  return {{"kind", "Job"}, {"metadata", to_json(job.meta)}, {"spec", spec_to_json(job.spec)},
          {"status", status_to_json(job.status)}};
}

Result<Job> job_from_json(const Json& json) {
  auto parts = read_object(json, "Job");
  if (!parts) return parts.error();
  if (!parts->has_spec) return Error::invalid_argument("spec", "", "required field is missing");
  Job job;
  job.meta = std::move(parts->meta);
  JsonReader spec_reader(*parts->spec, "spec");
  job.spec = read_spec(spec_reader);
  if (!spec_reader.status()) return spec_reader.status().error();
  JsonReader status_reader(*parts->status, "status");
  job.status = read_status(status_reader);
  if (!status_reader.status()) return status_reader.status().error();
  return job;
}

}  // namespace cnlab::model

#include "sim/replay_trace.h"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>

#include "sched/policy_config.h"
#include "sim/csv_reader.h"

namespace cnlab::sim {
namespace {

constexpr std::string_view kOpenbProject = "openb";
// The latest time (and longest run) a generic row may name, as the openb loader allows: about
// 35,000 years, far from overflowing the engine's arithmetic on seconds.
constexpr double kMaxSeconds = static_cast<double>(int64_t{1} << 40);
constexpr std::string_view kDefaultProject = "default";
constexpr std::string_view kDefaultClass = "dev";

// The classes a job may name: the tiers of the scheduler's default configuration, which is what
// the replay runs.
std::vector<std::string> class_names() {
  std::vector<std::string> names;
  for (const auto& tier : sched::PolicyConfig{}.tiers) names.push_back(tier.name);
  return names;
}

// 1..99 blocks as a block slice; 100 or more is a whole GPU (a kBlocks request holds at most 99).
void set_share(model::SliceRequest& gpu, int blocks) {
  if (blocks >= model::kBlocksPerGpu) {
    gpu.kind = model::SliceKind::kWhole;
    gpu.blocks = model::kBlocksPerGpu;
  } else {
    gpu.kind = model::SliceKind::kBlocks;
    gpu.blocks = std::max(blocks, 1);
  }
  gpu.gpu_count = 1;
}

model::SliceRequest no_gpu() { return {model::SliceKind::kNone, 0, 0, 0, -1, std::nullopt}; }

Duration at_least_one_second(int64_t seconds, size_t& zero_count) {
  if (seconds <= 0) {
    ++zero_count;
    return Duration{1};
  }
  return Duration{seconds};
}

void sort_by_submit(std::vector<ReplayJob>& jobs) {
  std::stable_sort(jobs.begin(), jobs.end(), [](const ReplayJob& a, const ReplayJob& b) { return a.submit < b.submit; });
}

}  // namespace

Result<std::string> class_of_qos(std::string_view qos, std::string_view field) {
  std::string q = to_lower(trim(qos));
  if (q.empty()) return std::string(kDefaultClass);
  if (q == "guaranteed") return std::string("inference");
  if (q == "ls") return std::string("production");
  if (q == "burstable") return std::string("dev");
  if (q == "be") return std::string("opportunistic");
  return Error::invalid_argument(std::string(field), std::string(qos),
                                 "unknown QoS; known: Guaranteed (-> inference), LS (-> production), "
                                 "Burstable (-> dev), BE (-> opportunistic), or empty (-> dev)");
}

Result<ReplayTrace> replay_trace_from_openb(const std::vector<OpenbPod>& pods, std::string label) {
  ReplayTrace trace;
  trace.format = TraceFormat::kOpenb;
  trace.label = std::move(label);
  trace.jobs.reserve(pods.size());
  for (const OpenbPod& pod : pods) {
    const std::string where = fmt::format("{}: pod {}", trace.label, pod.name);
    if (!pod.creation_time || !pod.deletion_time) {
      return Error::invalid_argument(where, pod.creation_time ? "no deletion_time" : "no creation_time",
                                     "every pod needs creation_time and deletion_time: the replay runs a pod "
                                     "from its arrival for as long as it ran in the real cluster");
    }
    int64_t start = pod.scheduled_time.value_or(*pod.creation_time);
    if (*pod.deletion_time < start) {
      return Error::invalid_argument(
          where, fmt::format("deletion_time={} {}={}", *pod.deletion_time,
                             pod.scheduled_time ? "scheduled_time" : "creation_time", start),
          "deletion_time must not be before the pod started");
    }
    ReplayJob job;
    job.name = pod.name;
    job.submit = trace_time(*pod.creation_time);
    job.run_time = at_least_one_second(*pod.deletion_time - start, trace.zero_run_time);
    if (!pod.scheduled_time) ++trace.unscheduled;
    model::JobSpec& spec = job.spec;
    spec.project = std::string(kOpenbProject);
    spec.user = std::string(kOpenbProject);
    auto cls = class_of_qos(pod.qos, where + ": qos");
    if (!cls) return cls.error();
    spec.priority_class = std::move(*cls);
    spec.cpu_milli = pod.cpu_milli;
    spec.memory_mib = pod.memory_mib;
    if (pod.num_gpu == 0) {
      spec.gpu = no_gpu();
    } else if (pod.num_gpu == 1 && pod.gpu_milli < kGpuMilli) {
      set_share(spec.gpu, (pod.gpu_milli + 9) / 10);  // rounding up never grants less than asked
    } else {
      spec.gpu.kind = model::SliceKind::kWhole;
      spec.gpu.gpu_count = pod.num_gpu;
    }
    if (pod.num_gpu > 0) {
      for (const std::string& name : pod.gpu_spec) {
        auto id = model::parse_model(name, where + ": gpu_spec");
        if (!id) return id.error();
        spec.gpu.models |= model::model_bit(*id);
      }
    }
    trace.jobs.push_back(std::move(job));
  }
  sort_by_submit(trace.jobs);
  return trace;
}

Result<ReplayTrace> replay_trace_from_generic(const std::vector<GenericJob>& jobs, std::string label) {
  ReplayTrace trace;
  trace.format = TraceFormat::kGeneric;
  trace.label = std::move(label);
  trace.jobs.reserve(jobs.size());
  const std::vector<std::string> classes = class_names();
  for (const GenericJob& row : jobs) {
    auto field = [&](std::string_view column) { return fmt::format("{}:{}: {}", trace.label, row.line, column); };
    for (auto [column, value] : {std::pair<const char*, double>{"submit_time", row.submit_time},
                                 {"duration", row.duration}, {"deadline", row.deadline.value_or(0)}}) {
      if (value > kMaxSeconds) {
        return Error::invalid_argument(field(column), fmt::format("{}", value),
                                       fmt::format("must be at most {} seconds", static_cast<int64_t>(kMaxSeconds)));
      }
    }
    ReplayJob job;
    job.name = fmt::format("line-{}", row.line);
    job.submit = trace_time(static_cast<int64_t>(std::floor(row.submit_time)));
    job.run_time = at_least_one_second(static_cast<int64_t>(std::ceil(row.duration)), trace.zero_run_time);
    model::JobSpec& spec = job.spec;
    spec.project = row.project.empty() ? std::string(kDefaultProject) : row.project;
    spec.user = spec.project;
    std::string cls = to_lower(row.job_class);
    if (cls.empty()) cls = std::string(kDefaultClass);
    if (std::find(classes.begin(), classes.end(), cls) == classes.end()) {
      return Error::invalid_argument(field("class"), row.job_class,
                                     fmt::format("unknown priority class; valid: {} (empty means dev)", join(classes, ", ")));
    }
    spec.priority_class = std::move(cls);
    if (row.num_gpus == 0) {
      spec.gpu = no_gpu();
    } else if (row.gpu_share < 1.0) {
      // The epsilon keeps 0.29 * 100 = 28.999... from becoming 29 and 0.25 * 100 from becoming 26.
      set_share(spec.gpu, static_cast<int>(std::ceil(row.gpu_share * model::kBlocksPerGpu - 1e-9)));
    } else {
      spec.gpu.kind = model::SliceKind::kWhole;
      spec.gpu.gpu_count = row.num_gpus;
    }
    if (!row.model.empty()) {
      auto id = model::find_model(row.model);
      if (!id) {
        return Error::invalid_argument(field("model"), row.model,
                                       fmt::format("unknown GPU model; known models: {}", model::model_names()));
      }
      if (row.num_gpus > 0) spec.gpu.models = model::model_bit(*id);
    }
    if (row.deadline) spec.deadline = trace_time(static_cast<int64_t>(std::floor(*row.deadline)));
    trace.jobs.push_back(std::move(job));
  }
  sort_by_submit(trace.jobs);
  return trace;
}

Result<ReplayTrace> parse_replay_trace(std::string_view text, std::string label) {
  std::string_view first = text.substr(0, text.find('\n'));
  std::vector<std::string> header;
  for (std::string_view cell : split(first, ',')) header.push_back(to_lower(trim(cell)));
  auto has = [&](std::string_view name) { return std::find(header.begin(), header.end(), name) != header.end(); };
  if (has("submit_time")) {
    auto jobs = parse_generic_jobs(text, label);
    if (!jobs) return jobs.error();
    return replay_trace_from_generic(*jobs, std::move(label));
  }
  if (has("name") && has("num_gpu")) {
    if (!has("creation_time") || !has("deletion_time")) {
      return Error::invalid_argument(
          label, std::string(trim(first)),
          "this openb pod list has no creation_time and deletion_time columns (openb_pod_list_multigpu20.csv is "
          "such a list), so it cannot say when pods arrive and leave; replay a pod list with times "
          "(openb_pod_list_default.csv) or a generic CSV (submit_time,duration,num_gpus,...)");
    }
    auto pods = parse_openb_pods(text, label);
    if (!pods) return pods.error();
    return replay_trace_from_openb(*pods, std::move(label));
  }
  return Error::invalid_argument(
      label, std::string(trim(first)),
      "unknown trace header; expected an openb pod list "
      "(name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,"
      "scheduled_time) or CNLab's generic CSV (submit_time,duration,num_gpus[,gpu_share,model,project,class,"
      "deadline])");
}

Result<ReplayTrace> load_replay_trace(const std::string& path) {
  auto text = read_text_file(path);
  if (!text) return text.error();
  return parse_replay_trace(*text, path);
}

}  // namespace cnlab::sim

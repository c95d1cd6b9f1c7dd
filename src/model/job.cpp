#include "model/job.h"

#include <fmt/format.h>

#include <algorithm>

#include "common/strings.h"
#include "model/decode.h"

namespace cnlab::model {
namespace {

// In lifecycle order, which is the order error messages list them.
constexpr std::pair<JobPhase, std::string_view> kPhases[] = {
    {JobPhase::kPending, "Pending"},     {JobPhase::kScheduled, "Scheduled"}, {JobPhase::kRunning, "Running"},
    {JobPhase::kSucceeded, "Succeeded"}, {JobPhase::kFailed, "Failed"},       {JobPhase::kCancelled, "Cancelled"},
};

constexpr std::pair<JobEventType, std::string_view> kEventTypes[] = {
    {JobEventType::kQueued, "Queued"},
    {JobEventType::kScheduled, "Scheduled"},
    {JobEventType::kStarted, "Started"},
    {JobEventType::kPreempted, "Preempted"},
    {JobEventType::kCheckpointed, "Checkpointed"},
    {JobEventType::kResumed, "Resumed"},
    {JobEventType::kFinished, "Finished"},
    {JobEventType::kCancelled, "Cancelled"},
    {JobEventType::kFailed, "Failed"},
    {JobEventType::kMemoryBurst, "MemoryBurst"},
    {JobEventType::kMoveRequested, "MoveRequested"},
    {JobEventType::kIdleReclaimed, "IdleReclaimed"},
    {JobEventType::kMigrationRequested, "MigrationRequested"},
    {JobEventType::kMigrated, "Migrated"},
    {JobEventType::kMigrationFailed, "MigrationFailed"},
    {JobEventType::kCheckpointFailed, "CheckpointFailed"},
    {JobEventType::kNotMovedForDrain, "NotMovedForDrain"},
    {JobEventType::kReleased, "Released"},
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
  j["command"] = spec.command;
  if (!spec.env.empty()) j["env"] = spec.env;
  if (!spec.working_dir.empty()) j["working_dir"] = spec.working_dir;
  if (spec.workspace) j["workspace"] = {{"digest", spec.workspace->digest}, {"size_bytes", spec.workspace->size_bytes}};
  return j;
}

}  // namespace

Json to_json(const CheckpointRef& checkpoint) {
  Json j = {{"digest", checkpoint.digest},
            {"size_bytes", checkpoint.size_bytes},
            {"taken_at", format_rfc3339(checkpoint.taken_at)},
            {"kind", checkpoint.kind}};
  if (checkpoint.gpu_state) j["gpu_state"] = true;
  if (!checkpoint.gpus.empty()) j["gpus"] = checkpoint.gpus;
  return j;
}

namespace {

Json gpus_to_json(const std::vector<GpuBinding>& bindings) {
  Json gpus = Json::array();
  for (const auto& g : bindings) {
    Json gj = {{"index", g.index}, {"blocks", g.blocks}, {"vram_mib", g.vram_mib}};
    if (g.mig_start >= 0) gj["mig_start"] = g.mig_start;
    gpus.push_back(std::move(gj));
  }
  return gpus;
}

Json status_to_json(const JobStatus& status) {
  Json j = {{"phase", to_string(status.phase)}, {"submitted_at", format_rfc3339(status.submitted_at)}};
  if (status.started_at) j["started_at"] = format_rfc3339(*status.started_at);
  if (status.last_checkpoint_at) j["last_checkpoint_at"] = format_rfc3339(*status.last_checkpoint_at);
  if (status.gpu_active_at) j["gpu_active_at"] = format_rfc3339(*status.gpu_active_at);
  if (status.memory_used_mib > 0) j["memory_used_mib"] = status.memory_used_mib;
  if (!status.placement.empty()) {
    Json nodes = Json::array();
    for (const auto& binding : status.placement) nodes.push_back({{"node", binding.node}, {"gpus", gpus_to_json(binding.gpus)}});
    j["placement"] = std::move(nodes);
  }
  if (!status.succeeded_nodes.empty()) j["succeeded_nodes"] = status.succeeded_nodes;
  if (!status.message.empty()) j["message"] = status.message;
  if (status.finished_at) j["finished_at"] = format_rfc3339(*status.finished_at);
  if (status.exit_code) j["exit_code"] = *status.exit_code;
  if (status.signal) j["signal"] = *status.signal;
  if (!status.events.empty()) {
    Json events = Json::array();
    for (const auto& e : status.events) events.push_back(to_json(e));
    j["events"] = std::move(events);
  }
  if (!status.waiting_reason.empty()) j["waiting_reason"] = status.waiting_reason;
  j["cancel_requested"] = status.cancel_requested;
  j["attempts"] = status.attempts;
  if (!status.attempt_nodes.empty()) j["attempt_nodes"] = status.attempt_nodes;
  if (status.checkpoint) j["checkpoint"] = to_json(*status.checkpoint);
  if (!status.older_checkpoints.empty()) {
    Json older = Json::array();
    for (const auto& c : status.older_checkpoints) older.push_back(to_json(c));
    j["older_checkpoints"] = std::move(older);
  }
  if (status.checkpoint_requested_at) j["checkpoint_requested_at"] = format_rfc3339(*status.checkpoint_requested_at);
  if (status.migration) {
    const Migration& m = *status.migration;
    Json move = {{"to", m.to}, {"requested_at", format_rfc3339(m.requested_at)}};
    if (!m.from.empty()) move["from"] = m.from;
    if (m.frozen_at) move["frozen_at"] = format_rfc3339(*m.frozen_at);
    if (m.frozen_at_ms > 0) move["frozen_at_ms"] = m.frozen_at_ms;
    if (!m.pages_from.empty()) move["pages_from"] = m.pages_from;
    if (!m.dump_digest.empty()) move["dump_digest"] = m.dump_digest;
    if (m.progress_at) move["progress_at"] = format_rfc3339(*m.progress_at);
    if (!m.progress.empty()) move["progress"] = m.progress;
    if (!m.gpus.empty()) move["gpus"] = gpus_to_json(m.gpus);
    if (!m.from_gpus.empty()) move["from_gpus"] = gpus_to_json(m.from_gpus);
    j["migration"] = std::move(move);
  }
  if (status.awaiting_release) {
    const auto& pending = *status.awaiting_release;
    j["awaiting_release"] = {{"nodes", pending.nodes}, {"since", format_rfc3339(pending.since)}};
    if (!pending.released.empty()) j["awaiting_release"]["released"] = pending.released;
  }
  return j;
}

std::vector<std::string> read_command(JsonReader& r) {
  std::vector<std::string> command;
  const Json* array = r.array("command");
  if (!array) return command;
  if (array->size() > kMaxCommandArgs) {
    r.fail(Error::invalid_argument(r.path_of("command"), fmt::format("{} arguments", array->size()),
                                   fmt::format("at most {} arguments", kMaxCommandArgs)));
    return command;
  }
  for (size_t i = 0; i < array->size(); ++i) {
    const Json& arg = (*array)[i];
    if (!arg.is_string()) {
      r.fail(Error::invalid_argument(fmt::format("{}[{}]", r.path_of("command"), i), arg.dump(), "expected a string"));
      return command;
    }
    command.push_back(arg.get<std::string>());
  }
  detail::check(r, validate_command(command));
  return command;
}

std::map<std::string, std::string> read_env(JsonReader& r) {
  std::map<std::string, std::string> env;
  const Json* object = r.object("env");
  if (!object) return env;
  for (const auto& [name, value] : object->items()) {
    if (!value.is_string()) {
      r.fail(Error::invalid_argument(r.path_of("env." + name), value.dump(), "expected a string"));
      return env;
    }
    env[name] = value.get<std::string>();
  }
  detail::check(r, validate_env(env));
  return env;
}

std::optional<WorkspaceRef> read_workspace(JsonReader& parent) {
  const Json* object = parent.object("workspace");
  if (!object) return std::nullopt;
  JsonReader r(*object, parent.path_of("workspace"));
  r.only({"digest", "size_bytes"});
  WorkspaceRef ref;
  ref.digest = r.string("digest");
  if (r.status()) detail::check(r, validate_digest(ref.digest, r.path_of("digest")));
  ref.size_bytes = r.integer_or("size_bytes", 0, 0, INT64_MAX);
  if (!r.status()) parent.fail(r.status().error());
  return ref;
}

JobSpec read_spec(JsonReader& r) {
  r.only({"project", "user", "priority_class", "gpu", "vram", "cpu_milli", "memory_mib", "deadline",
          "estimated_duration", "checkpointable", "min_runtime", "command", "env", "working_dir", "workspace"});
  JobSpec spec;
  spec.project = detail::required_name(r, "project");
  spec.user = detail::optional_name(r, "user");
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
  spec.command = read_command(r);
  spec.env = read_env(r);
  spec.working_dir = r.string_or("working_dir", "");
  if (r.status()) detail::check(r, validate_working_dir(spec.working_dir));
  spec.workspace = read_workspace(r);
  return spec;
}

std::vector<GpuBinding> read_gpu_bindings(const Json& array, const std::string& path, JsonReader& parent) {
  std::vector<GpuBinding> bindings;
  for (size_t k = 0; k < array.size(); ++k) {
    JsonReader g(array[k], fmt::format("{}[{}]", path, k));
    g.only({"index", "blocks", "vram_mib", "mig_start"});
    GpuBinding gb;
    gb.index = static_cast<int>(g.integer_or("index", 0, 0, 1023));
    gb.blocks = static_cast<int>(g.integer_or("blocks", kBlocksPerGpu, 1, kBlocksPerGpu));
    gb.vram_mib = g.integer_or("vram_mib", 0, 0, kMaxMemoryMib);
    gb.mig_start = static_cast<int>(g.integer_or("mig_start", -1, -1, kMigMemorySlots - 1));
    if (!g.status()) parent.fail(g.status().error());
    bindings.push_back(gb);
  }
  return bindings;
}

std::vector<NodeBinding> read_placement(const Json& array, const std::string& path, JsonReader& parent) {
  std::vector<NodeBinding> placement;
  for (size_t i = 0; i < array.size(); ++i) {
    JsonReader node(array[i], fmt::format("{}[{}]", path, i));
    node.only({"node", "gpus"});
    NodeBinding binding{node.string("node"), {}};
    if (const Json* gpus = node.array("gpus")) binding.gpus = read_gpu_bindings(*gpus, node.path_of("gpus"), node);
    if (!node.status()) parent.fail(node.status().error());
    placement.push_back(std::move(binding));
  }
  return placement;
}

std::vector<std::string> read_node_names(const Json& array, const std::string& path, JsonReader& parent) {
  std::vector<std::string> names;
  for (size_t i = 0; i < array.size() && parent.status(); ++i) {
    std::string field = fmt::format("{}[{}]", path, i);
    if (!array[i].is_string()) {
      parent.fail(Error::invalid_argument(field, array[i].dump(), "expected a node name"));
      break;
    }
    std::string name = array[i].get<std::string>();
    detail::check(parent, validate_name(name, field));
    names.push_back(std::move(name));
  }
  return names;
}

std::vector<JobEvent> read_events(const Json& array, const std::string& path, JsonReader& parent) {
  std::vector<JobEvent> events;
  for (size_t i = 0; i < array.size() && parent.status(); ++i) {
    JsonReader e(array[i], fmt::format("{}[{}]", path, i));
    e.only({"type", "time", "reason"});
    JobEvent event;
    if (!e.has("type")) e.fail(Error::invalid_argument(e.path_of("type"), "", "required field is missing"));
    event.type = detail::read_enum(e, "type", kEventTypes, JobEventType::kQueued, "event types");
    event.time = detail::required_time(e, "time");
    event.reason = e.string_or("reason", "");
    if (!e.status()) parent.fail(e.status().error());
    events.push_back(std::move(event));
  }
  return events;
}

CheckpointRef read_checkpoint(const Json& json, const std::string& path, JsonReader& parent) {
  JsonReader r(json, path);
  r.only({"digest", "size_bytes", "taken_at", "kind", "gpu_state", "gpus"});
  CheckpointRef ref;
  ref.digest = r.string("digest");
  ref.kind = r.string_or("kind", "files");
  if (r.status() && ref.kind != "files" && ref.kind != "process") {
    r.fail(Error::invalid_argument(r.path_of("kind"), ref.kind, "\"files\" or \"process\""));
  }
  ref.gpu_state = r.boolean_or("gpu_state", false);
  ref.gpus = r.string_or("gpus", "");
  if (r.status() && !ref.gpus.empty() && ref.gpus != "real" && ref.gpus != "simulated") {
    r.fail(Error::invalid_argument(r.path_of("gpus"), ref.gpus, "\"real\", \"simulated\" or absent"));
  }
  if (r.status()) detail::check(r, validate_digest(ref.digest, r.path_of("digest")));
  ref.size_bytes = r.integer_or("size_bytes", 0, 0, INT64_MAX);
  ref.taken_at = detail::required_time(r, "taken_at");
  if (!r.status()) parent.fail(r.status().error());
  return ref;
}

JobStatus read_status(JsonReader& r) {
  r.only({"phase", "submitted_at", "started_at", "last_checkpoint_at", "gpu_active_at", "memory_used_mib", "placement", "succeeded_nodes", "message",
          "finished_at", "exit_code", "signal", "events", "waiting_reason", "cancel_requested", "attempts",
          "attempt_nodes", "checkpoint", "older_checkpoints", "checkpoint_requested_at", "migration",
          "awaiting_release"});
  JobStatus status;
  status.phase = detail::read_enum(r, "phase", kPhases, JobPhase::kPending, "phases");
  status.submitted_at = r.time("submitted_at").value_or(Time{});
  status.started_at = r.time("started_at");
  status.last_checkpoint_at = r.time("last_checkpoint_at");
  status.gpu_active_at = r.time("gpu_active_at");
  status.memory_used_mib = r.integer_or("memory_used_mib", 0, 0, kMaxMemoryUsedMib);
  if (const Json* placement = r.array("placement")) status.placement = read_placement(*placement, r.path_of("placement"), r);
  if (const Json* succeeded = r.array("succeeded_nodes")) {
    status.succeeded_nodes = read_node_names(*succeeded, r.path_of("succeeded_nodes"), r);
  }
  status.message = r.string_or("message", "");
  status.finished_at = r.time("finished_at");
  if (auto code = detail::optional_integer(r, "exit_code", 0, 255)) status.exit_code = static_cast<int>(*code);
  if (auto sig = detail::optional_integer(r, "signal", 1, 127)) status.signal = static_cast<int>(*sig);
  if (const Json* events = r.array("events")) status.events = read_events(*events, r.path_of("events"), r);
  status.waiting_reason = r.string_or("waiting_reason", "");
  status.cancel_requested = r.boolean_or("cancel_requested", false);
  status.attempts = static_cast<int>(r.integer_or("attempts", 0, 0, INT32_MAX));
  if (const Json* nodes = r.array("attempt_nodes")) status.attempt_nodes = read_node_names(*nodes, r.path_of("attempt_nodes"), r);
  if (const Json* checkpoint = r.object("checkpoint")) {
    status.checkpoint = read_checkpoint(*checkpoint, r.path_of("checkpoint"), r);
  }
  if (const Json* older = r.array("older_checkpoints")) {
    for (size_t i = 0; i < older->size() && r.status(); ++i) {
      status.older_checkpoints.push_back(
          read_checkpoint((*older)[i], fmt::format("{}[{}]", r.path_of("older_checkpoints"), i), r));
    }
  }
  status.checkpoint_requested_at = r.time("checkpoint_requested_at");
  if (const Json* migration = r.object("migration")) {
    JsonReader m(*migration, r.path_of("migration"));
    // pages_fingerprint and pages_token: what a migration under way before node certificates
    // carried; read and dropped (the migration then fails on its target and the job runs on).
    m.only({"to", "requested_at", "from", "frozen_at", "frozen_at_ms", "pages_from", "dump_digest", "progress_at",
            "progress", "gpus", "from_gpus", "pages_fingerprint", "pages_token"});
    Migration move;
    move.to = m.string_or("to", "");
    move.requested_at = detail::required_time(m, "requested_at");
    move.from = m.string_or("from", "");
    move.frozen_at = m.time("frozen_at");
    move.frozen_at_ms = m.integer_or("frozen_at_ms", 0, 0, INT64_MAX);
    move.pages_from = m.string_or("pages_from", "");
    move.dump_digest = m.string_or("dump_digest", "");
    move.progress_at = m.time("progress_at");
    move.progress = m.string_or("progress", "");
    if (const Json* gpus = m.array("gpus")) move.gpus = read_gpu_bindings(*gpus, m.path_of("gpus"), m);
    if (const Json* gpus = m.array("from_gpus")) move.from_gpus = read_gpu_bindings(*gpus, m.path_of("from_gpus"), m);
    if (!m.status()) r.fail(m.status().error());
    status.migration = std::move(move);
  }
  if (const Json* release = r.object("awaiting_release")) {
    JsonReader a(*release, r.path_of("awaiting_release"));
    a.only({"nodes", "since", "released"});
    PendingRelease pending;
    if (const Json* nodes = a.array("nodes")) pending.nodes = read_node_names(*nodes, a.path_of("nodes"), a);
    if (a.status() && pending.nodes.empty()) {
      a.fail(Error::invalid_argument(a.path_of("nodes"), "[]", "the nodes the job waits for: at least one"));
    }
    pending.since = detail::required_time(a, "since");
    if (const Json* released = a.array("released")) {
      for (size_t i = 0; i < released->size() && a.status(); ++i) {
        const Json& clause = (*released)[i];
        if (!clause.is_string() || clause.get_ref<const std::string&>().size() > kMaxReleaseClause) {
          a.fail(Error::invalid_argument(fmt::format("{}[{}]", a.path_of("released"), i), clause.dump().substr(0, 60),
                                         fmt::format("a string of at most {} bytes", kMaxReleaseClause)));
        } else {
          pending.released.push_back(clause.get<std::string>());
        }
      }
    }
    if (!a.status()) r.fail(a.status().error());
    status.awaiting_release = std::move(pending);
  }
  if (r.status() && status.phase == JobPhase::kRunning && (status.placement.empty() || !status.started_at)) {
    r.fail(Error::invalid_argument(r.path_of("phase"), "Running", "a Running job needs a placement and started_at"));
  }
  if (r.status() && status.phase == JobPhase::kScheduled && status.placement.empty()) {
    r.fail(Error::invalid_argument(r.path_of("phase"), "Scheduled", "a Scheduled job needs a placement"));
  }
  return status;
}

}  // namespace

std::string_view to_string(JobPhase phase) { return detail::name_of(kPhases, phase); }

std::optional<JobPhase> parse_job_phase(std::string_view name) { return detail::find_by_name(kPhases, name); }

bool is_terminal(JobPhase phase) {
  return phase == JobPhase::kSucceeded || phase == JobPhase::kFailed || phase == JobPhase::kCancelled;
}

std::string_view to_string(JobEventType type) { return detail::name_of(kEventTypes, type); }

Json to_json(const JobEvent& event) {
  Json j = {{"type", to_string(event.type)}, {"time", format_rfc3339(event.time)}};
  if (!event.reason.empty()) j["reason"] = event.reason;
  return j;
}

std::optional<JobEventType> parse_job_event_type(std::string_view name) {
  return detail::find_by_name(kEventTypes, name);
}

Status validate_command(const std::vector<std::string>& command) {
  if (command.size() > kMaxCommandArgs) {
    return Error::invalid_argument("spec.command", fmt::format("{} arguments", command.size()),
                                   fmt::format("at most {} arguments", kMaxCommandArgs));
  }
  for (size_t i = 0; i < command.size(); ++i) {
    const std::string& arg = command[i];
    std::string field = fmt::format("spec.command[{}]", i);
    if (arg.size() > kMaxCommandArgBytes) {
      return Error::invalid_argument(
          field, arg.substr(0, 64) + "...",
          fmt::format("an argument is at most {} bytes; this one is {}", kMaxCommandArgBytes, arg.size()));
    }
    if (arg.find('\0') != std::string::npos) {
      return Error::invalid_argument(field, arg, "an argument must not contain a NUL character");
    }
  }
  return Status::ok();
}

Status validate_env(const std::map<std::string, std::string>& env) {
  if (env.size() > kMaxEnvEntries) {
    return Error::invalid_argument("spec.env", fmt::format("{} entries", env.size()),
                                   fmt::format("at most {} entries", kMaxEnvEntries));
  }
  auto letter = [](char c) { return (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z') || c == '_'; };
  for (const auto& [name, value] : env) {
    std::string field = "spec.env." + name;
    bool ok = !name.empty() && letter(name.front());
    for (char c : name) ok = ok && (letter(c) || (c >= '0' && c <= '9'));
    if (!ok) {
      return Error::invalid_argument(field, name,
                                     "environment variable names are letters, digits and '_', not starting "
                                     "with a digit");
    }
    if (value.size() > kMaxEnvValueBytes) {
      return Error::invalid_argument(
          field, value.substr(0, 64) + "...",
          fmt::format("a value is at most {} bytes; this one is {}", kMaxEnvValueBytes, value.size()));
    }
    if (value.find('\0') != std::string::npos) {
      return Error::invalid_argument(field, value, "a value must not contain a NUL character");
    }
  }
  return Status::ok();
}

Status validate_working_dir(std::string_view working_dir) {
  auto bad = [&](std::string_view why) {
    return Error::invalid_argument("spec.working_dir", std::string(working_dir),
                                   std::string(why) +
                                       "; the working directory is a path relative to the workspace "
                                       "root, such as \"src/train\" (\"\" for the root)");
  };
  if (working_dir.size() > kMaxWorkingDirBytes) return bad(fmt::format("longer than {} bytes", kMaxWorkingDirBytes));
  if (working_dir.find('\0') != std::string_view::npos) return bad("contains a NUL character");
  if (working_dir.starts_with('/')) return bad("an absolute path is not allowed");
  for (std::string_view part : split(working_dir, '/')) {
    if (part == "..") return bad("a \"..\" component is not allowed");
  }
  return Status::ok();
}

HostShare host_share(const JobSpec& spec, const std::vector<NodeBinding>& placement, std::string_view node) {
  size_t gpus_total = 0, here = 0, bindings_here = 0;
  for (const auto& binding : placement) {
    gpus_total += binding.gpus.size();
    if (binding.node != node) continue;
    here += binding.gpus.size();
    ++bindings_here;
  }
  if (bindings_here == 0) return {};
  const size_t share = gpus_total == 0 ? bindings_here : here;
  const size_t of = gpus_total == 0 ? placement.size() : gpus_total;
  auto part = [&](int64_t whole) {
    return static_cast<int64_t>((static_cast<size_t>(std::max<int64_t>(whole, 0)) * share + of - 1) / of);
  };
  return {part(spec.cpu_milli), part(spec.memory_mib)};
}

int64_t memory_to_move_mib(const Job& job) { return std::max(job.spec.memory_mib, job.status.memory_used_mib); }

bool bound_to(const Job& job, std::string_view node) {
  return std::any_of(job.status.placement.begin(), job.status.placement.end(),
                     [&](const NodeBinding& binding) { return binding.node == node; });
}

bool ran_latest_attempt_on(const Job& job, std::string_view node) {
  return std::find(job.status.attempt_nodes.begin(), job.status.attempt_nodes.end(), node) !=
         job.status.attempt_nodes.end();
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

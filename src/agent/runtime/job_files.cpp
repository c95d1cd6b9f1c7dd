#include "agent/runtime/job_files.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include <fmt/format.h>

#include "agent/runtime/output_format.h"
#include "common/json_reader.h"
#include "common/strings.h"

namespace cnlab::agent::jobfiles {
namespace {

namespace fs = std::filesystem;

constexpr size_t kMaxFileBytes = 16 * 1024 * 1024;

std::string errno_text(int err) { return std::strerror(err); }

Status write_all(int fd, std::string_view content) {
  while (!content.empty()) {
    const ssize_t n = ::write(fd, content.data(), content.size());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return Error::internal("write: " + errno_text(errno));
    content.remove_prefix(static_cast<size_t>(n));
  }
  return {};
}

std::string dump(const Json& json) { return json.dump(-1, ' ', false, Json::error_handler_t::replace); }

Result<Json> parse(std::string_view text, std::string_view what) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error::invalid_argument(std::string(what), std::string(text.substr(0, 80)), "not a JSON object");
  }
  return json;
}

std::vector<std::string> strings(JsonReader& reader, std::string_view key) {
  std::vector<std::string> out;
  if (const Json* array = reader.array(key)) {
    for (const auto& item : *array) {
      if (!item.is_string()) {
        reader.fail(Error::invalid_argument(reader.path_of(key), item.dump(), "strings expected"));
        break;
      }
      out.push_back(item.get<std::string>());
    }
  }
  return out;
}

Json capabilities_json(const RuntimeCapabilities& c) {
  return Json{{"cgroups", std::string(to_string(c.cgroups))},
              {"cpu_limit", c.cpu_limit},
              {"memory_limit", c.memory_limit},
              {"swap_limit", c.swap_limit},
              {"pids_limit", c.pids_limit},
              {"tree_kill", c.tree_kill},
              {"namespaces", c.namespaces},
              {"switch_user", c.switch_user},
              {"cgroups_reason", c.cgroups_reason},
              {"namespaces_reason", c.namespaces_reason}};
}

RuntimeCapabilities capabilities_from(JsonReader& reader) {
  RuntimeCapabilities c;
  const std::string version = reader.string_or("cgroups", "none");
  c.cgroups = version == "v1" ? CgroupVersion::kV1 : version == "v2" ? CgroupVersion::kV2 : CgroupVersion::kNone;
  c.cpu_limit = reader.boolean_or("cpu_limit", false);
  c.memory_limit = reader.boolean_or("memory_limit", false);
  c.swap_limit = reader.boolean_or("swap_limit", false);
  c.pids_limit = reader.boolean_or("pids_limit", false);
  c.tree_kill = reader.boolean_or("tree_kill", false);
  c.namespaces = reader.boolean_or("namespaces", false);
  c.switch_user = reader.boolean_or("switch_user", false);
  c.cgroups_reason = reader.string_or("cgroups_reason", "");
  c.namespaces_reason = reader.string_or("namespaces_reason", "");
  return c;
}

constexpr int64_t kMaxId = 0xFFFFFFFFLL;

}  // namespace

Status write_atomic(const fs::path& dir, std::string_view name, std::string_view content) {
  const int dir_fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dir_fd < 0) return Error::of(ErrorCode::kUnavailable, "job_dir", dir.string(), "open: " + errno_text(errno));
  const std::string temp = fmt::format(".{}.tmp", name);
  const std::string final_name(name);
  // A file of that name planted by the job would be removed here (we may unlink in our own sticky
  // directory), and O_EXCL | O_NOFOLLOW never writes through a planted symlink.
  (void)::unlinkat(dir_fd, temp.c_str(), 0);
  const int fd = ::openat(dir_fd, temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const int err = errno;
    ::close(dir_fd);
    return Error::of(ErrorCode::kUnavailable, "file", (dir / temp).string(), "create: " + errno_text(err));
  }
  Status written = write_all(fd, content);
  if (written && ::fsync(fd) != 0) written = Error::internal("fsync: " + errno_text(errno));
  ::close(fd);
  if (written && ::renameat(dir_fd, temp.c_str(), dir_fd, final_name.c_str()) != 0) {
    written = Error::internal("rename: " + errno_text(errno));
  }
  if (written) (void)::fsync(dir_fd);
  if (!written) (void)::unlinkat(dir_fd, temp.c_str(), 0);
  ::close(dir_fd);
  if (!written) {
    return Error::of(ErrorCode::kUnavailable, "file", (dir / final_name).string(), written.error().message);
  }
  return {};
}

Result<std::string> read_trusted(const fs::path& file) {
  const int fd = ::open(file.c_str(), O_RDONLY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Error::of(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable, "file", file.string(),
                     "open: " + errno_text(err));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_uid != ::geteuid()) {
    ::close(fd);
    return Error::of(ErrorCode::kPermissionDenied, "file", file.string(),
                     fmt::format("not a regular file owned by uid {}: not written by the runtime", ::geteuid()));
  }
  std::string out;
  char buffer[16384];
  while (out.size() < kMaxFileBytes) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

std::optional<ProcStat> read_proc_stat(pid_t pid) {
  if (pid <= 0) return std::nullopt;
  auto text = cgroups::read_file(fmt::format("/proc/{}/stat", pid));
  if (!text) return std::nullopt;
  // The command name may hold spaces and parentheses: the fields start after the last ')'.
  const size_t close = text->rfind(')');
  if (close == std::string::npos) return std::nullopt;
  std::vector<std::string_view> fields;
  for (auto f : split(std::string_view(*text).substr(close + 1), ' ')) {
    if (!f.empty()) fields.push_back(f);
  }
  // fields[0] is field 3 (state); start time is field 22.
  if (fields.size() < 20 || fields[0].empty()) return std::nullopt;
  auto ppid = parse_int(fields[1], "ppid");
  auto start = parse_int(fields[19], "starttime");
  if (!ppid || !start) return std::nullopt;
  return ProcStat{fields[0][0], static_cast<pid_t>(*ppid), static_cast<uint64_t>(*start)};
}

std::string encode(const LaunchSpec& spec) {
  Json groups = Json::array();
  for (auto g : spec.groups) groups.push_back(g);
  Json json{{"job_id", spec.job_id},
            {"argv", spec.argv},
            {"env", spec.env},
            {"working_dir", spec.working_dir},
            {"hostname", spec.hostname},
            {"namespaces", spec.namespaces},
            {"switch_user", spec.switch_user},
            {"uid", spec.uid},
            {"gid", spec.gid},
            {"groups", groups},
            {"cgroup", cgroups::to_json(spec.cgroup)},
            {"isolation", capabilities_json(spec.isolation)},
            {"shim_command", spec.shim_command}};
  if (!spec.view_mounts.empty()) {
    Json mounts = Json::array();
    for (const ViewMount& m : spec.view_mounts) mounts.push_back({{"source", m.source.string()}, {"view", m.view}});
    json["view_mounts"] = mounts;
  }
  if (!spec.restore_from.empty()) {
    json["restore_from"] = spec.restore_from;
    json["criu"] = spec.criu;
    json["restore_timeout_ms"] = spec.restore_timeout_ms;
    if (spec.restore_lazy) json["restore_lazy"] = true;
  }
  return dump(json);
}

Result<LaunchSpec> decode_spec(std::string_view text) {
  auto json = parse(text, "spec.json");
  if (!json) return json.error();
  JsonReader reader(*json, "spec.json");
  LaunchSpec spec;
  spec.job_id = reader.string_or("job_id", "");
  spec.argv = strings(reader, "argv");
  spec.env = strings(reader, "env");
  spec.working_dir = reader.string_or("working_dir", "/");
  spec.shim_command = strings(reader, "shim_command");
  spec.restore_from = reader.string_or("restore_from", "");
  spec.criu = reader.string_or("criu", "");
  spec.restore_timeout_ms = reader.integer_or("restore_timeout_ms", 120000, 1, INT32_MAX);
  spec.restore_lazy = reader.boolean_or("restore_lazy", false);
  spec.hostname = reader.string_or("hostname", "");
  spec.namespaces = reader.boolean_or("namespaces", false);
  if (const Json* mounts = reader.array("view_mounts")) {
    for (const auto& m : *mounts) {
      if (!m.is_object() || !m.contains("source") || !m["source"].is_string() || !m.contains("view") ||
          !m["view"].is_string()) {
        reader.fail(Error::invalid_argument(reader.path_of("view_mounts"), m.dump(), "{\"source\", \"view\"} expected"));
        break;
      }
      spec.view_mounts.push_back({m["source"].get<std::string>(), m["view"].get<std::string>()});
    }
  }
  spec.switch_user = reader.boolean_or("switch_user", false);
  spec.uid = static_cast<uint32_t>(reader.integer_or("uid", 0, 0, kMaxId));
  spec.gid = static_cast<uint32_t>(reader.integer_or("gid", 0, 0, kMaxId));
  if (const Json* groups = reader.array("groups")) {
    for (const auto& g : *groups) {
      if (!g.is_number_unsigned() || g.get<uint64_t>() > static_cast<uint64_t>(kMaxId)) {
        reader.fail(Error::invalid_argument(reader.path_of("groups"), g.dump(), "group ids expected"));
        break;
      }
      spec.groups.push_back(g.get<uint32_t>());
    }
  }
  if (const Json* cgroup = reader.object("cgroup")) {
    auto decoded = cgroups::from_json(*cgroup, reader.path_of("cgroup"));
    if (decoded)
      spec.cgroup = std::move(*decoded);
    else
      reader.fail(decoded.error());
  }
  if (const Json* isolation = reader.object("isolation")) {
    JsonReader nested(*isolation, reader.path_of("isolation"));
    spec.isolation = capabilities_from(nested);
    if (auto s = nested.status(); !s) reader.fail(s.error());
  }
  if (spec.argv.empty()) reader.fail(Error::invalid_argument("spec.json.argv", "[]", "a command is needed"));
  if (auto s = reader.status(); !s) return s.error();
  return spec;
}

std::string encode(const ShimState& state) {
  return dump(Json{{"shim_pid", state.shim_pid},
                   {"shim_start_time", state.shim_start_time},
                   {"job_pid", state.job_pid},
                   {"job_start_time", state.job_start_time},
                   {"pid_namespace", state.pid_namespace},
                   {"stdout_pipe", state.stdout_pipe},
                   {"stderr_pipe", state.stderr_pipe},
                   {"status_pipe", state.status_pipe}});
}

Result<ShimState> decode_state(std::string_view text) {
  auto json = parse(text, "state.json");
  if (!json) return json.error();
  JsonReader reader(*json, "state.json");
  ShimState state;
  state.shim_pid = static_cast<pid_t>(reader.integer_or("shim_pid", 0, 1, INT32_MAX));
  state.shim_start_time = static_cast<uint64_t>(reader.integer_or("shim_start_time", 0, 0, INT64_MAX));
  state.job_pid = static_cast<pid_t>(reader.integer_or("job_pid", 0, 0, INT32_MAX));
  state.job_start_time = static_cast<uint64_t>(reader.integer_or("job_start_time", 0, 0, INT64_MAX));
  state.pid_namespace = reader.boolean_or("pid_namespace", false);
  state.stdout_pipe = static_cast<uint64_t>(reader.integer_or("stdout_pipe", 0, 0, INT64_MAX));
  state.stderr_pipe = static_cast<uint64_t>(reader.integer_or("stderr_pipe", 0, 0, INT64_MAX));
  state.status_pipe = static_cast<uint64_t>(reader.integer_or("status_pipe", 0, 0, INT64_MAX));
  if (!reader.has("shim_pid")) reader.fail(Error::invalid_argument("state.json.shim_pid", "", "required"));
  if (auto s = reader.status(); !s) return s.error();
  return state;
}

std::string encode(const ExitRecord& record) {
  Json json{{"oom_killed", record.oom_killed},
            {"oom_kills", record.oom_kills},
            {"stopped", record.stopped},
            {"finished_at", record.finished_at}};
  if (record.exit_code) json["exit_code"] = *record.exit_code;
  if (record.signal) json["signal"] = *record.signal;
  if (!record.error.empty()) json["error"] = record.error;
  return dump(json);
}

Result<ExitRecord> decode_exit(std::string_view text) {
  auto json = parse(text, "exit.json");
  if (!json) return json.error();
  JsonReader reader(*json, "exit.json");
  ExitRecord record;
  if (reader.has("exit_code")) record.exit_code = static_cast<int>(reader.integer_or("exit_code", 0, 0, 255));
  if (reader.has("signal")) record.signal = static_cast<int>(reader.integer_or("signal", 0, 1, 127));
  record.oom_killed = reader.boolean_or("oom_killed", false);
  record.oom_kills = reader.integer_or("oom_kills", 0, 0, INT64_MAX);
  record.stopped = reader.boolean_or("stopped", false);
  record.error = reader.string_or("error", "");
  record.finished_at = reader.string_or("finished_at", "");
  if (auto s = reader.status(); !s) return s.error();
  return record;
}

JobStatus to_status(const ExitRecord& record) {
  JobStatus status;
  status.state = JobState::kExited;
  status.exit_code = record.exit_code;
  status.signal = record.signal;
  status.oom_killed = record.oom_killed;
  status.oom_kills = record.oom_kills;
  status.stopped = record.stopped;
  status.error = record.error;
  if (auto time = output::parse_timestamp(record.finished_at)) status.finished_at = *time;
  return status;
}

}  // namespace cnlab::agent::jobfiles

#include "agent/runtime/criu.h"

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <optional>
#include <sstream>
#include <thread>

#include <fmt/format.h>

#include "agent/runtime/cgroups.h"
#include "agent/runtime/job_files.h"
#include "common/json_reader.h"
#include "common/strings.h"

namespace cnlab::agent::criu {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr uint32_t kImageMagicBytes = 8;  // two 32-bit magics open every image
constexpr uint32_t kFileEntryReg = 3;     // FileEntry.reg (RegFileEntry)
constexpr uint32_t kRegFileName = 6;      // RegFileEntry.name

// --- protobuf wire format, just enough to rewrite one string field --------------------------

bool read_varint(std::string_view data, size_t& pos, uint64_t& value) {
  value = 0;
  for (int shift = 0; shift < 64 && pos < data.size(); shift += 7) {
    const auto byte = static_cast<uint8_t>(data[pos++]);
    value |= static_cast<uint64_t>(byte & 0x7f) << shift;
    if ((byte & 0x80) == 0) return true;
  }
  return false;
}

void write_varint(std::string& out, uint64_t value) {
  while (value >= 0x80) {
    out.push_back(static_cast<char>((value & 0x7f) | 0x80));
    value >>= 7;
  }
  out.push_back(static_cast<char>(value));
}

struct Field {
  uint32_t number = 0;
  uint32_t wire_type = 0;
  std::string_view raw;      // tag and value, as found
  std::string_view payload;  // a length-delimited field's bytes
};

std::optional<std::vector<Field>> parse_fields(std::string_view data) {
  std::vector<Field> fields;
  size_t pos = 0;
  while (pos < data.size()) {
    const size_t start = pos;
    uint64_t tag = 0;
    if (!read_varint(data, pos, tag)) return std::nullopt;
    Field field;
    field.number = static_cast<uint32_t>(tag >> 3);
    field.wire_type = static_cast<uint32_t>(tag & 7);
    uint64_t value = 0;
    switch (field.wire_type) {
      case 0:
        if (!read_varint(data, pos, value)) return std::nullopt;
        break;
      case 1: pos += 8; break;
      case 5: pos += 4; break;
      case 2:
        if (!read_varint(data, pos, value) || value > data.size() - pos) return std::nullopt;
        field.payload = data.substr(pos, value);
        pos += value;
        break;
      default: return std::nullopt;
    }
    if (pos > data.size()) return std::nullopt;
    field.raw = data.substr(start, pos - start);
    fields.push_back(field);
  }
  return fields;
}

void write_bytes_field(std::string& out, uint32_t number, std::string_view bytes) {
  write_varint(out, (static_cast<uint64_t>(number) << 3) | 2);
  write_varint(out, bytes.size());
  out.append(bytes);
}

// `path` moved from below `from` to below `to`, or nothing when it is not below `from`.
std::optional<std::string> moved(std::string_view path, std::string_view from, std::string_view to) {
  if (path.substr(0, from.size()) != from) return std::nullopt;
  if (path.size() > from.size() && path[from.size()] != '/') return std::nullopt;
  return std::string(to) + std::string(path.substr(from.size()));
}

// One FileEntry: its reg file's name rewritten, or nothing when it needs no change.
std::optional<std::string> rewrite_entry(std::string_view entry, std::string_view from, std::string_view to,
                                         bool& malformed) {
  auto fields = parse_fields(entry);
  if (!fields) {
    malformed = true;
    return std::nullopt;
  }
  std::string out;
  bool changed = false;
  for (const Field& field : *fields) {
    if (field.number != kFileEntryReg || field.wire_type != 2) {
      out.append(field.raw);
      continue;
    }
    auto reg = parse_fields(field.payload);
    if (!reg) {
      malformed = true;
      return std::nullopt;
    }
    std::string reg_out;
    for (const Field& r : *reg) {
      std::optional<std::string> name;
      if (r.number == kRegFileName && r.wire_type == 2) name = moved(r.payload, from, to);
      if (name) {
        write_bytes_field(reg_out, r.number, *name);
        changed = true;
      } else {
        reg_out.append(r.raw);
      }
    }
    write_bytes_field(out, field.number, reg_out);
  }
  if (!changed) return std::nullopt;
  return out;
}

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string encode(const Pipes& pipes) {
  return Json{{"stdout_pipe", pipes.stdout_pipe}, {"stderr_pipe", pipes.stderr_pipe}, {"status_pipe", pipes.status_pipe}}
      .dump();
}

Result<Pipes> decode_pipes(std::string_view text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (json.is_discarded() || !json.is_object()) {
    return Error::invalid_argument(std::string(kPipesFile), std::string(text.substr(0, 80)), "not a JSON object");
  }
  JsonReader reader(json, std::string(kPipesFile));
  Pipes pipes;
  pipes.stdout_pipe = static_cast<uint64_t>(reader.integer_or("stdout_pipe", 0, 0, INT64_MAX));
  pipes.stderr_pipe = static_cast<uint64_t>(reader.integer_or("stderr_pipe", 0, 0, INT64_MAX));
  pipes.status_pipe = static_cast<uint64_t>(reader.integer_or("status_pipe", 0, 0, INT64_MAX));
  if (auto s = reader.status(); !s) return s.error();
  return pipes;
}

namespace {

// The filesystems CRIU dumps itself (its own table, less those it only mounts anew by name).
bool criu_dumps(std::string_view type) {
  static constexpr std::string_view kKnown[] = {
      "proc",   "sysfs",   "devtmpfs", "binfmt_misc", "tmpfs",  "devpts",  "mqueue",  "securityfs", "fusectl",
      "debugfs", "tracefs", "pstore",  "cgroup",      "cgroup2", "overlay", "autofs",  "bpf",        "configfs",
      "hugetlbfs", "btrfs", "nsfs"};
  return std::find(std::begin(kKnown), std::end(kKnown), type) != std::end(kKnown);
}

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape_mount_path(std::string_view field) {
  std::string out;
  for (size_t i = 0; i < field.size(); ++i) {
    if (field[i] == '\\' && i + 3 < field.size()) {
      const std::string_view octal = field.substr(i + 1, 3);
      if (std::all_of(octal.begin(), octal.end(), [](char c) { return c >= '0' && c <= '7'; })) {
        out.push_back(static_cast<char>((octal[0] - '0') * 64 + (octal[1] - '0') * 8 + (octal[2] - '0')));
        i += 3;
        continue;
      }
    }
    out.push_back(field[i]);
  }
  return out;
}

std::string mount_key(size_t index) { return "cnlab-mount-" + std::to_string(index); }

}  // namespace

std::vector<std::string> external_mounts(std::string_view mountinfo) {
  std::vector<std::string> out;
  std::istringstream lines{std::string(mountinfo)};
  for (std::string line; std::getline(lines, line);) {
    // ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTIONS [OPTIONAL...] - TYPE SOURCE SUPER_OPTIONS
    std::istringstream fields(line);
    std::vector<std::string> field;
    for (std::string f; fields >> f;) field.push_back(f);
    auto dash = std::find(field.begin(), field.end(), "-");
    if (field.size() < 5 || dash == field.end() || dash + 1 == field.end()) continue;
    const std::string mount_point = unescape_mount_path(field[4]);
    if (mount_point == "/" || criu_dumps(*(dash + 1))) continue;
    if (std::find(out.begin(), out.end(), mount_point) == out.end()) out.push_back(mount_point);
  }
  return out;
}

std::string encode_mounts(const std::vector<std::string>& mounts) { return Json{{"external_mounts", mounts}}.dump(); }

Result<std::vector<std::string>> decode_mounts(std::string_view text) {
  Json json = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  const std::string file(kExternalMountsFile);
  if (json.is_discarded() || !json.is_object() || !json.contains("external_mounts") ||
      !json["external_mounts"].is_array()) {
    return Error::invalid_argument(file, std::string(text.substr(0, 80)), "an object with an \"external_mounts\" array");
  }
  std::vector<std::string> mounts;
  for (const auto& m : json["external_mounts"]) {
    // Absolute paths only, never "..": a restore bind-mounts each one from this machine.
    if (!m.is_string() || m.get<std::string>().empty() || m.get<std::string>()[0] != '/' ||
        m.get<std::string>().find("/../") != std::string::npos || m.get<std::string>().ends_with("/..")) {
      return Error::invalid_argument(file + ".external_mounts", m.dump(), "absolute paths without \"..\"");
    }
    mounts.push_back(m.get<std::string>());
  }
  return mounts;
}

std::vector<std::string> environment() {
  return {"CRIU_FAULT=130", "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"};
}

std::vector<std::string> dump_args(const std::string& criu, pid_t pid, const fs::path& images, const fs::path& log,
                                   Leave leave, const std::vector<std::string>& external, const HostPort* lazy) {
  std::vector<std::string> args = {criu, "dump", "--tree", std::to_string(pid), "--images-dir", images.string(),
                                   "--log-file", log.string(), "--manage-cgroups=ignore", "--file-locks"};
  for (size_t i = 0; i < external.size(); ++i) {
    args.insert(args.end(), {"--external", fmt::format("mnt[{}]:{}", external[i], mount_key(i))});
  }
  if (leave == Leave::kRunning) args.push_back("--leave-running");
  if (leave == Leave::kStopped) args.push_back("--leave-stopped");
  if (lazy) {
    args.insert(args.end(),
                {"--lazy-pages", "--address", lazy->host, "--port", std::to_string(lazy->port), "--status-fd", "3"});
  }
  return args;
}

std::vector<std::string> lazy_pages_args(const std::string& criu, const fs::path& images, const fs::path& log,
                                         const HostPort& from) {
  return {criu,   "lazy-pages", "--page-server", "--address",  from.host,    "--port",
          std::to_string(from.port), "--images-dir", images.string(), "--log-file", log.string()};
}

std::vector<std::string> restore_args(const std::string& criu, const fs::path& images, const fs::path& log,
                                      const fs::path& pid_file, const Pipes& pipes, int status_fd, int stdout_fd,
                                      int stderr_fd, const std::vector<std::string>& external, bool lazy) {
  // --root /: the job's mount namespace is restored from the images over this machine's root.
  std::vector<std::string> args = {criu, "restore", "--images-dir", images.string(), "--log-file", log.string(),
                                   "--restore-detached", "--root", "/", "--manage-cgroups=ignore", "--file-locks",
                                   "--pidfile", pid_file.string()};
  auto inherit = [&](int fd, uint64_t inode) {
    if (inode == 0) return;
    args.push_back("--inherit-fd");
    args.push_back(fmt::format("fd[{}]:pipe:[{}]", fd, inode));
  };
  inherit(status_fd, pipes.status_pipe);
  inherit(stdout_fd, pipes.stdout_pipe);
  inherit(stderr_fd, pipes.stderr_pipe);
  for (size_t i = 0; i < external.size(); ++i) {
    args.insert(args.end(), {"--external", fmt::format("mnt[{}]:{}", mount_key(i), external[i])});
  }
  if (lazy) args.push_back("--lazy-pages");
  return args;
}

Result<pid_t> spawn(const std::vector<std::string>& args, int status_fd) {
  std::vector<std::string> args_copy = args;
  std::vector<char*> argv;
  for (auto& arg : args_copy) argv.push_back(arg.data());
  argv.push_back(nullptr);
  std::vector<std::string> env = environment();
  std::vector<char*> envp;
  for (auto& entry : env) envp.push_back(entry.data());
  envp.push_back(nullptr);

  posix_spawn_file_actions_t actions;
  posix_spawnattr_t attr;
  posix_spawn_file_actions_init(&actions);
  posix_spawnattr_init(&attr);
  posix_spawn_file_actions_addopen(&actions, STDIN_FILENO, "/dev/null", O_RDONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDOUT_FILENO, "/dev/null", O_WRONLY, 0);
  posix_spawn_file_actions_addopen(&actions, STDERR_FILENO, "/dev/null", O_WRONLY, 0);
  if (status_fd >= 0) posix_spawn_file_actions_adddup2(&actions, status_fd, 3);
  posix_spawn_file_actions_addclosefrom_np(&actions, status_fd >= 0 ? 4 : 3);
  sigset_t none, all;
  sigemptyset(&none);
  sigfillset(&all);
  posix_spawnattr_setsigmask(&attr, &none);
  posix_spawnattr_setsigdefault(&attr, &all);
  posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETSIGMASK | POSIX_SPAWN_SETSIGDEF);
  pid_t pid = 0;
  const int rc = ::posix_spawn(&pid, argv[0], &actions, &attr, argv.data(), envp.data());
  posix_spawn_file_actions_destroy(&actions);
  posix_spawnattr_destroy(&attr);
  if (rc != 0) return Error::of(ErrorCode::kFailedPrecondition, "criu", args[0], "cannot run: " + errno_text(rc));
  return pid;
}

RunResult wait(pid_t pid, steady_clock::time_point started, milliseconds timeout,
               const std::function<bool()>& give_up) {
  RunResult result;
  int status = 0;
  bool exited = false;
  while (steady_clock::now() - started < timeout && !(give_up && give_up())) {
    const pid_t got = ::waitpid(pid, &status, WNOHANG);
    if (got == pid || (got < 0 && errno == ECHILD)) {
      exited = got == pid;
      if (got < 0) status = 0x7f00;  // reaped by someone else: unknown, reported as failed
      break;
    }
    std::this_thread::sleep_for(milliseconds(2));
  }
  if (!exited && status != 0x7f00) {
    ::kill(pid, SIGKILL);
    ::waitpid(pid, &status, 0);
    result.timed_out = true;
  }
  result.took = std::chrono::duration_cast<milliseconds>(steady_clock::now() - started);
  if (exited && WIFEXITED(status)) result.exit_code = WEXITSTATUS(status);
  return result;
}

Result<RunResult> run(const std::vector<std::string>& args, milliseconds timeout) {
  const auto started = steady_clock::now();
  auto pid = spawn(args);
  if (!pid) return pid.error();
  return wait(*pid, started, timeout);
}

Status check(const std::string& criu, milliseconds timeout) {
  if (criu.empty() || criu[0] != '/') {
    return Error::invalid_argument("criu", criu, "an absolute path to the criu binary is required");
  }
  if (::access(criu.c_str(), X_OK) != 0) {
    return Error::of(ErrorCode::kFailedPrecondition, "criu", criu, "not executable: " + errno_text(errno));
  }
  if (::geteuid() != 0) return Error::failed_precondition("CRIU needs the agent to run as root");
  auto ran = run({criu, "check"}, timeout);
  if (!ran) return ran.error();
  if (ran->timed_out) {
    return Error::failed_precondition(fmt::format("'{} check' did not finish within {}ms", criu, timeout.count()));
  }
  if (ran->exit_code != 0) {
    return Error::failed_precondition(
        fmt::format("'{} check' fails here (exit code {}): this kernel or machine lacks what CRIU needs", criu,
                    ran->exit_code));
  }
  return {};
}

std::string log_errors(const fs::path& log) {
  auto text = cgroups::read_file(log);
  if (!text) return "no CRIU log (" + log.string() + ")";
  std::vector<std::string> errors;
  for (auto line : split(*text, '\n')) {
    // The rlimit line is every run's on machines without CAP_SYS_RESOURCE, and harmless.
    if (line.find("Error") != std::string_view::npos && line.find("RLIMIT_NOFILE") == std::string_view::npos) {
      errors.emplace_back(trim(line));
    }
  }
  if (errors.empty()) return "see " + log.string();
  if (errors.size() > 3) errors.erase(errors.begin(), errors.end() - 3);
  return join(errors, "; ") + " (" + log.string() + ")";
}

Result<int> rewrite_paths(const fs::path& images, std::string_view from, std::string_view to) {
  const fs::path file = images / "files.img";
  std::ifstream in(file, std::ios::binary);
  if (!in) return Error::not_found("images", images.string(), "no files.img: not a CRIU image directory");
  std::stringstream buffer;
  buffer << in.rdbuf();
  const std::string data = buffer.str();
  if (data.size() < kImageMagicBytes) {
    return Error::invalid_argument("files.img", file.string(), "shorter than an image's magic");
  }
  std::string out = data.substr(0, kImageMagicBytes);
  int rewritten = 0;
  size_t pos = kImageMagicBytes;
  while (pos < data.size()) {
    uint32_t size = 0;
    if (data.size() - pos < sizeof size) return Error::invalid_argument("files.img", file.string(), "truncated entry");
    std::memcpy(&size, data.data() + pos, sizeof size);
    pos += sizeof size;
    if (size > data.size() - pos) return Error::invalid_argument("files.img", file.string(), "truncated entry");
    const std::string_view entry(data.data() + pos, size);
    pos += size;
    bool malformed = false;
    auto changed = rewrite_entry(entry, from, to, malformed);
    if (malformed) return Error::invalid_argument("files.img", file.string(), "an entry is not valid protobuf");
    const std::string_view written = changed ? std::string_view(*changed) : entry;
    const auto written_size = static_cast<uint32_t>(written.size());
    out.append(reinterpret_cast<const char*>(&written_size), sizeof written_size);
    out.append(written);
    if (changed) ++rewritten;
  }
  if (rewritten == 0) return 0;
  if (auto s = jobfiles::write_atomic(images, "files.img", out); !s) return s.error();
  return rewritten;
}

}  // namespace cnlab::agent::criu

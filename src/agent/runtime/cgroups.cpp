#include "agent/runtime/cgroups.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <set>
#include <thread>

#include <fmt/format.h>

#include "common/strings.h"

namespace cnlab::agent::cgroups {
namespace {

namespace fs = std::filesystem;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

constexpr int64_t kCfsPeriodUs = 100000;
constexpr int64_t kMinCfsQuotaUs = 1000;  // the kernel refuses less than 1 ms a period
constexpr milliseconds kPollStep{5};
constexpr milliseconds kFreezeTimeout{1000};

// The controllers the runtime uses, in the order the job joins their v1 hierarchies.
constexpr std::string_view kV1Controllers[] = {"memory", "cpu", "pids", "freezer"};
constexpr std::string_view kV2Controllers[] = {"cpu", "memory", "pids"};
constexpr std::string_view kKnownV1Controllers[] = {"blkio",    "cpu",        "cpuacct", "cpuset", "devices",
                                                    "freezer",  "hugetlb",    "memory",  "misc",   "net_cls",
                                                    "net_prio", "perf_event", "pids",    "rdma"};

std::string errno_text(int err) { return std::strerror(err); }

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    if (text[i] == '\\' && i + 3 < text.size() && text[i + 1] >= '0' && text[i + 1] <= '7' && text[i + 2] >= '0' &&
        text[i + 2] <= '7' && text[i + 3] >= '0' && text[i + 3] <= '7') {
      out.push_back(static_cast<char>((text[i + 1] - '0') * 64 + (text[i + 2] - '0') * 8 + (text[i + 3] - '0')));
      i += 3;
    } else {
      out.push_back(text[i]);
    }
  }
  return out;
}

std::set<std::string> words(std::string_view text) {
  std::set<std::string> out;
  for (auto word : split(trim(text), ' ')) {
    word = trim(word);
    if (!word.empty()) out.emplace(word);
  }
  return out;
}

bool path_exists(const fs::path& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0;
}

// mkdir -p, reporting the first failure with its path.
Status make_dirs(const fs::path& dir) {
  fs::path current;
  for (const auto& part : dir) {
    current /= part;
    if (::mkdir(current.c_str(), 0755) != 0 && errno != EEXIST) {
      return Error::of(ErrorCode::kUnavailable, "cgroup directory", current.string(), "mkdir: " + errno_text(errno));
    }
  }
  return {};
}

Status remove_tree(const fs::path& dir, steady_clock::time_point deadline) {
  if (DIR* d = ::opendir(dir.c_str())) {
    std::vector<fs::path> children;
    while (dirent* entry = ::readdir(d)) {
      if (entry->d_type != DT_DIR) continue;
      const std::string_view name = entry->d_name;
      if (name == "." || name == "..") continue;
      children.push_back(dir / entry->d_name);
    }
    ::closedir(d);
    for (const auto& child : children) {
      if (auto s = remove_tree(child, deadline); !s) return s;
    }
  }
  while (true) {
    if (::rmdir(dir.c_str()) == 0 || errno == ENOENT) return {};
    const int err = errno;
    // EBUSY while exiting tasks are still charged to the cgroup.
    if (err != EBUSY || steady_clock::now() >= deadline) {
      return Error::of(ErrorCode::kUnavailable, "cgroup directory", dir.string(), "rmdir: " + errno_text(err));
    }
    std::this_thread::sleep_for(kPollStep);
  }
}

Result<std::set<std::string>> read_words(const fs::path& path) {
  auto text = read_file(path);
  if (!text) return text.error();
  return words(*text);
}

// A counter line such as "oom_kill 3" in memory.events / memory.oom_control.
int64_t counter(std::string_view text, std::string_view key) {
  for (auto line : split(text, '\n')) {
    line = trim(line);
    if (line.size() > key.size() && line.substr(0, key.size()) == key && line[key.size()] == ' ') {
      auto value = parse_int(trim(line.substr(key.size() + 1)), key);
      if (value) return *value;
    }
  }
  return 0;
}

// A job cgroup of the same name may be left over from a crash: reuse it when it is empty (every
// limit is written again, "no limit" included); one that still holds processes is another job's.
Status prepare_dir(const fs::path& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0) return {};
  if (errno != EEXIST) {
    return Error::of(ErrorCode::kUnavailable, "cgroup directory", dir.string(), "mkdir: " + errno_text(errno));
  }
  JobCgroup old;
  old.version = CgroupVersion::kV1;
  old.dirs = {dir};
  if (!old.procs().empty()) {
    return Error::of(ErrorCode::kAlreadyExists, "cgroup_name", dir.filename().string(),
                     "the cgroup " + dir.string() + " still holds processes of another job");
  }
  return {};
}

Status write_limit(const fs::path& file, int64_t value, std::string_view field, std::string_view text) {
  if (auto s = write_file(file, text); !s) {
    return Error::invalid_argument(std::string(field), std::to_string(value),
                                   "the kernel refused it: " + s.error().message);
  }
  return {};
}

Status freeze(const JobCgroup& cgroup, bool frozen) {
  const bool v2 = cgroup.version == CgroupVersion::kV2;
  const fs::path file = cgroup.freezer_dir / (v2 ? "cgroup.freeze" : "freezer.state");
  if (auto s = write_file(file, v2 ? (frozen ? "1" : "0") : (frozen ? "FROZEN" : "THAWED")); !s) return s;
  if (!frozen) return {};
  // Freezing is asynchronous: wait until every task is in the refrigerator.
  const auto deadline = steady_clock::now() + kFreezeTimeout;
  while (steady_clock::now() < deadline) {
    if (v2) {
      auto events = read_file(cgroup.freezer_dir / "cgroup.events");
      if (events && counter(*events, "frozen") == 1) return {};
    } else {
      auto state = read_file(file);
      if (state && trim(*state) == "FROZEN") return {};
      // Thawed by someone else meanwhile (the shim and the agent may both be killing the job).
      if (state && trim(*state) == "THAWED") (void)write_file(file, "FROZEN");
    }
    std::this_thread::sleep_for(milliseconds(1));
  }
  return Error::of(ErrorCode::kUnavailable, "cgroup directory", cgroup.freezer_dir.string(),
                   "did not freeze within 1s");
}

void kill_each(const std::vector<pid_t>& pids) {
  for (pid_t pid : pids) ::kill(pid, SIGKILL);
}

}  // namespace

Status write_file(const fs::path& path, std::string_view content) {
  // O_TRUNC is accepted (and ignored) by cgroupfs, and makes the same code work on plain files.
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC | O_CLOEXEC);
  if (fd < 0) return Error::of(ErrorCode::kUnavailable, "file", path.string(), "open: " + errno_text(errno));
  const ssize_t n = ::write(fd, content.data(), content.size());
  const int err = errno;
  ::close(fd);
  if (n != static_cast<ssize_t>(content.size())) {
    return Error::of(ErrorCode::kUnavailable, "file", path.string(),
                     fmt::format("write \"{}\": {}", content, n < 0 ? errno_text(err) : "short write"));
  }
  return {};
}

Result<std::string> read_file(const fs::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Error::of(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable, "file", path.string(),
                     "open: " + errno_text(err));
  }
  std::string out;
  char buffer[4096];
  while (true) {
    const ssize_t n = ::read(fd, buffer, sizeof buffer);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Error::of(ErrorCode::kUnavailable, "file", path.string(), "read: " + errno_text(err));
    }
    if (n == 0) break;
    out.append(buffer, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

Mounts parse_mountinfo(std::string_view text) {
  Mounts mounts;
  for (auto line : split(text, '\n')) {
    // id parent major:minor root mount-point options [optional...] - fstype source super-options
    std::vector<std::string_view> fields;
    for (auto f : split(line, ' ')) {
      if (!f.empty()) fields.push_back(f);
    }
    const auto dash = std::find(fields.begin(), fields.end(), std::string_view("-"));
    if (dash == fields.end() || dash - fields.begin() < 6 || fields.end() - dash < 4) continue;
    const std::string_view fstype = dash[1];
    const fs::path mount_point = unescape(fields[4]);
    if (fstype == "cgroup2") {
      if (!mounts.unified) mounts.unified = mount_point;
    } else if (fstype == "cgroup") {
      for (auto option : split(dash[3], ',')) {
        const bool known = std::find(std::begin(kKnownV1Controllers), std::end(kKnownV1Controllers), option) !=
                           std::end(kKnownV1Controllers);
        if (known) mounts.v1.emplace(std::string(option), mount_point);
      }
    }
  }
  return mounts;
}

namespace {

// v2 is usable when the unified hierarchy offers at least one of cpu, memory and pids and they
// can be enabled down to <parent>'s children. Returns nullopt (with a note) otherwise.
std::optional<Layout> detect_v2(const fs::path& unified, std::string_view parent, std::vector<std::string>& notes) {
  auto offered = read_words(unified / "cgroup.controllers");
  if (!offered) {
    notes.push_back("cgroup2 at " + unified.string() + ": " + offered.error().message);
    return std::nullopt;
  }
  std::vector<std::string> wanted;
  for (auto c : kV2Controllers) {
    if (offered->count(std::string(c))) wanted.emplace_back(c);
  }
  if (wanted.empty()) {
    notes.push_back("cgroup2 at " + unified.string() +
                    " offers none of cpu, memory, pids (they are bound to v1 hierarchies)");
    return std::nullopt;
  }
  // Enable the controllers at every level from the root down to <parent>, whose children are the
  // job cgroups. A level that holds processes refuses (the no-internal-process rule): then the
  // controllers are missing below it, which the check at the end reports.
  fs::path current = unified;
  auto enable = [&](const fs::path& dir) {
    for (const auto& c : wanted) (void)write_file(dir / "cgroup.subtree_control", "+" + c);
  };
  for (const auto& part : fs::path(std::string(parent))) {
    enable(current);
    current /= part;
    if (::mkdir(current.c_str(), 0755) != 0 && errno != EEXIST) {
      notes.push_back("cgroup2: mkdir " + current.string() + ": " + errno_text(errno));
      return std::nullopt;
    }
  }
  enable(current);
  auto enabled = read_words(current / "cgroup.subtree_control");
  if (!enabled || enabled->empty()) {
    notes.push_back("cgroup2: no controller could be enabled in " + current.string() +
                    "/cgroup.subtree_control (no delegation?)");
    return std::nullopt;
  }
  if (::access(current.c_str(), W_OK) != 0) {
    notes.push_back("cgroup2: " + current.string() + " is not writable: " + errno_text(errno));
    return std::nullopt;
  }
  Layout layout;
  layout.version = CgroupVersion::kV2;
  layout.v2_parent = current;
  layout.cpu = enabled->count("cpu") > 0;
  layout.memory = enabled->count("memory") > 0;
  layout.pids = enabled->count("pids") > 0;
  layout.freezer = path_exists(current / "cgroup.freeze");
  std::vector<std::string> missing;
  for (auto c : kV2Controllers) {
    if (!enabled->count(std::string(c))) missing.emplace_back(c);
  }
  if (!missing.empty()) layout.reason = "cgroup2: controllers not available: " + join(missing, ", ");
  return layout;
}

}  // namespace

Layout detect(const Mounts& mounts, std::string_view parent) {
  std::vector<std::string> notes;
  if (mounts.unified) {
    if (auto v2 = detect_v2(*mounts.unified, parent, notes)) return *v2;
  }
  Layout layout;
  for (auto c : kV1Controllers) {
    const auto mount = mounts.v1.find(std::string(c));
    if (mount == mounts.v1.end()) {
      notes.push_back(fmt::format("no cgroup v1 hierarchy with {}", c));
      continue;
    }
    const fs::path dir = mount->second / std::string(parent);
    if (auto s = make_dirs(dir); !s) {
      notes.push_back(s.error().to_string());
      continue;
    }
    if (::access(dir.c_str(), W_OK) != 0) {
      notes.push_back(fmt::format("{} is not writable: {}", dir.string(), errno_text(errno)));
      continue;
    }
    layout.v1_parents.emplace(std::string(c), dir);
  }
  layout.cpu = layout.v1_parents.count("cpu") > 0;
  layout.memory = layout.v1_parents.count("memory") > 0;
  layout.pids = layout.v1_parents.count("pids") > 0;
  layout.freezer = layout.v1_parents.count("freezer") > 0;
  layout.swap = layout.memory && path_exists(layout.v1_parents["memory"] / "memory.memsw.limit_in_bytes");
  layout.version = layout.v1_parents.empty() ? CgroupVersion::kNone : CgroupVersion::kV1;
  if (layout.version == CgroupVersion::kV1 && layout.memory && !layout.swap) {
    notes.push_back("no memory.memsw.limit_in_bytes (swap accounting off): jobs may swap");
  }
  // All there: what was tried before (an unusable unified hierarchy) is no news.
  const bool complete = layout.cpu && layout.memory && layout.pids && layout.freezer && layout.swap;
  layout.reason = complete ? "" : join(notes, "; ");
  return layout;
}

Result<JobCgroup> create(const Layout& layout, std::string_view name, const ResourceLimits& limits,
                         int64_t pids_extra) {
  JobCgroup cgroup;
  cgroup.version = layout.version;
  if (layout.version == CgroupVersion::kNone) return cgroup;

  auto fail = [&](Error error) -> Result<JobCgroup> {
    (void)cgroup.remove(milliseconds(500));
    return error;
  };
  const int64_t quota = std::max(kMinCfsQuotaUs, limits.cpu_milli * kCfsPeriodUs / 1000);
  const bool cpu = limits.cpu_milli > 0;
  const bool memory = limits.memory_bytes > 0;
  const bool pids = limits.pids > 0;
  const std::string bytes = std::to_string(limits.memory_bytes);
  const std::string tasks = std::to_string(limits.pids + pids_extra);

  if (layout.version == CgroupVersion::kV2) {
    const fs::path dir = layout.v2_parent / std::string(name);
    if (auto s = prepare_dir(dir); !s) return s.error();
    cgroup.dirs = {dir};
    if (layout.memory) cgroup.memory_dir = dir;
    if (layout.freezer) cgroup.freezer_dir = dir;
    if (layout.cpu) {
      const std::string value = cpu ? fmt::format("{} {}", quota, kCfsPeriodUs) : fmt::format("max {}", kCfsPeriodUs);
      if (auto s = write_limit(dir / "cpu.max", limits.cpu_milli, "limits.cpu_milli", value); !s)
        return fail(s.error());
      cgroup.cpu_limit = cpu;
    }
    if (layout.memory) {
      if (auto s = write_limit(dir / "memory.max", limits.memory_bytes, "limits.memory_bytes", memory ? bytes : "max");
          !s) {
        return fail(s.error());
      }
      cgroup.memory_limit = memory;
      // Absent without swap support in the kernel: then there is no swap to keep the job from.
      cgroup.swap_limit = path_exists(dir / "memory.swap.max") && write_file(dir / "memory.swap.max", "0");
      // One OOM kill takes the whole job: it is one unit for the scheduler.
      if (path_exists(dir / "memory.oom.group")) (void)write_file(dir / "memory.oom.group", "1");
    }
    if (layout.pids) {
      if (auto s = write_limit(dir / "pids.max", limits.pids, "limits.pids", pids ? tasks : "max"); !s) {
        return fail(s.error());
      }
      cgroup.pids_limit = pids;
    }
    return cgroup;
  }

  for (auto c : kV1Controllers) {
    const auto parent = layout.v1_parents.find(std::string(c));
    if (parent == layout.v1_parents.end()) continue;
    const fs::path dir = parent->second / std::string(name);
    if (auto s = prepare_dir(dir); !s) return fail(s.error());
    cgroup.dirs.push_back(dir);
    if (c == "memory") {
      cgroup.memory_dir = dir;
      // memory+swap may never be below memory: lift it first, then set memory, then (to keep
      // swap off) memory+swap to the same value. Without swap accounting (no memsw file), at
      // least make the kernel reluctant to swap the job.
      if (layout.swap) (void)write_file(dir / "memory.memsw.limit_in_bytes", "-1");
      if (auto s = write_limit(dir / "memory.limit_in_bytes", limits.memory_bytes, "limits.memory_bytes",
                               memory ? bytes : "-1");
          !s) {
        return fail(s.error());
      }
      cgroup.memory_limit = memory;
      if (memory && layout.swap && write_file(dir / "memory.memsw.limit_in_bytes", bytes)) {
        cgroup.swap_limit = true;
      } else {
        (void)write_file(dir / "memory.swappiness", "0");
      }
    } else if (c == "cpu") {
      if (auto s = write_limit(dir / "cpu.cfs_period_us", limits.cpu_milli, "limits.cpu_milli",
                               std::to_string(kCfsPeriodUs));
          !s) {
        return fail(s.error());
      }
      if (auto s = write_limit(dir / "cpu.cfs_quota_us", limits.cpu_milli, "limits.cpu_milli",
                               cpu ? std::to_string(quota) : "-1");
          !s) {
        return fail(s.error());
      }
      cgroup.cpu_limit = cpu;
    } else if (c == "pids") {
      if (auto s = write_limit(dir / "pids.max", limits.pids, "limits.pids", pids ? tasks : "max"); !s) {
        return fail(s.error());
      }
      cgroup.pids_limit = pids;
    } else if (c == "freezer") {
      cgroup.freezer_dir = dir;
      // A leftover may have been left frozen.
      (void)write_file(dir / "freezer.state", "THAWED");
    }
  }
  if (cgroup.dirs.empty()) cgroup.version = CgroupVersion::kNone;
  return cgroup;
}

Status JobCgroup::join_self() const {
  for (const auto& dir : dirs) {
    if (auto s = write_file(dir / "cgroup.procs", "0"); !s) return s;
  }
  return {};
}

std::vector<pid_t> JobCgroup::procs() const {
  std::vector<pid_t> pids;
  if (dirs.empty()) return pids;
  auto text = read_file(procs_dir() / "cgroup.procs");
  if (!text) return pids;
  for (auto line : split(*text, '\n')) {
    auto pid = parse_int(trim(line), "pid");
    if (pid && *pid > 0) pids.push_back(static_cast<pid_t>(*pid));
  }
  return pids;
}

Status JobCgroup::kill_all(milliseconds timeout) const {
  if (empty() || procs().empty()) return {};
  const auto deadline = steady_clock::now() + timeout;
  const fs::path kill_file = procs_dir() / "cgroup.kill";
  const bool has_kill = version == CgroupVersion::kV2 && path_exists(kill_file);
  if (has_kill) {
    if (auto s = write_file(kill_file, "1"); !s) return s;
  } else if (!freezer_dir.empty()) {
    // Frozen, the tree cannot fork new processes between reading cgroup.procs and the kills.
    const bool frozen = static_cast<bool>(freeze(*this, true));
    kill_each(procs());
    (void)freeze(*this, false);
    if (!frozen) kill_each(procs());
  } else {
    kill_each(procs());
  }
  if (timeout.count() <= 0) return {};
  while (true) {
    const auto left = procs();
    if (left.empty()) return {};
    if (steady_clock::now() >= deadline) {
      std::vector<std::string> listed;
      for (pid_t pid : left) listed.push_back(std::to_string(pid));
      return Error::of(ErrorCode::kUnavailable, "cgroup directory", procs_dir().string(),
                       fmt::format("processes remain after SIGKILL for {}ms: {}", timeout.count(), join(listed, " ")));
    }
    if (!has_kill) kill_each(left);
    std::this_thread::sleep_for(kPollStep);
  }
}

int64_t JobCgroup::oom_kills() const {
  if (memory_dir.empty()) return 0;
  const bool v2 = version == CgroupVersion::kV2;
  auto text = read_file(memory_dir / (v2 ? "memory.events" : "memory.oom_control"));
  if (!text) return 0;
  return counter(*text, "oom_kill");
}

Status JobCgroup::remove(milliseconds timeout) const {
  const auto deadline = steady_clock::now() + timeout;
  Status result;
  for (const auto& dir : dirs) {
    if (auto s = remove_tree(dir, deadline); !s && result) result = s;
  }
  return result;
}

Json to_json(const JobCgroup& cgroup) {
  Json dirs = Json::array();
  for (const auto& dir : cgroup.dirs) dirs.push_back(dir.string());
  return Json{{"version", std::string(to_string(cgroup.version))},
              {"dirs", dirs},
              {"memory_dir", cgroup.memory_dir.string()},
              {"freezer_dir", cgroup.freezer_dir.string()},
              {"cpu_limit", cgroup.cpu_limit},
              {"memory_limit", cgroup.memory_limit},
              {"swap_limit", cgroup.swap_limit},
              {"pids_limit", cgroup.pids_limit}};
}

Result<JobCgroup> from_json(const Json& json, std::string path) {
  JsonReader reader(json, path);
  JobCgroup cgroup;
  const std::string version = reader.string_or("version", "none");
  if (version == "v1")
    cgroup.version = CgroupVersion::kV1;
  else if (version == "v2")
    cgroup.version = CgroupVersion::kV2;
  else if (version == "none")
    cgroup.version = CgroupVersion::kNone;
  else
    reader.fail(Error::invalid_argument(reader.path_of("version"), version, "allowed: none, v1, v2"));
  if (const Json* dirs = reader.array("dirs")) {
    for (const auto& dir : *dirs) {
      if (!dir.is_string() || dir.get<std::string>().empty() || dir.get<std::string>()[0] != '/') {
        reader.fail(Error::invalid_argument(reader.path_of("dirs"), dir.dump(), "absolute paths expected"));
        break;
      }
      cgroup.dirs.emplace_back(dir.get<std::string>());
    }
  }
  cgroup.memory_dir = reader.string_or("memory_dir", "");
  cgroup.freezer_dir = reader.string_or("freezer_dir", "");
  cgroup.cpu_limit = reader.boolean_or("cpu_limit", false);
  cgroup.memory_limit = reader.boolean_or("memory_limit", false);
  cgroup.swap_limit = reader.boolean_or("swap_limit", false);
  cgroup.pids_limit = reader.boolean_or("pids_limit", false);
  if (cgroup.version != CgroupVersion::kNone && cgroup.dirs.empty()) {
    reader.fail(Error::invalid_argument(reader.path_of("dirs"), "[]", "a cgroup needs at least one directory"));
  }
  if (auto s = reader.status(); !s) return s.error();
  return cgroup;
}

}  // namespace cnlab::agent::cgroups

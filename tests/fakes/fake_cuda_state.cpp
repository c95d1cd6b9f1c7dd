// Part of the TEST DOUBLE of libcuda.so.1 (see fake_cuda.cpp): configuration and shared state.
#include "fake_cuda_state.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <new>
#include <random>

namespace cnlab::fake_cuda {
namespace {

// -- configuration ------------------------------------------------------------------------------

using Fields = std::vector<std::pair<std::string, std::string>>;

// Splits `directive key=value key="value with spaces" # comment`. Returns an error or "".
std::string split_fields(const std::string& line, std::string& directive, Fields& fields) {
  size_t i = 0;
  auto skip_space = [&] {
    while (i < line.size() && (line[i] == ' ' || line[i] == '\t' || line[i] == '\r')) ++i;
  };
  skip_space();
  while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '#') directive += line[i++];
  while (true) {
    skip_space();
    if (i >= line.size() || line[i] == '#') return "";
    std::string key, value;
    while (i < line.size() && line[i] != '=' && line[i] != ' ' && line[i] != '\t') key += line[i++];
    if (i >= line.size() || line[i] != '=') return "field \"" + key + "\" has no value (expected key=value)";
    ++i;
    if (i < line.size() && line[i] == '"') {
      ++i;
      while (i < line.size() && line[i] != '"') value += line[i++];
      if (i >= line.size()) return "unterminated quote in the value of \"" + key + "\"";
      ++i;
    } else {
      while (i < line.size() && line[i] != ' ' && line[i] != '\t' && line[i] != '#') value += line[i++];
    }
    fields.emplace_back(key, value);
  }
}

bool parse_u64(std::string_view text, uint64_t& out) {
  if (text.empty()) return false;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), out);
  return ec == std::errc() && end == text.data() + text.size();
}

std::string default_uuid(size_t index) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "GPU-fa4ec0da-c0de-4000-8000-%012zx", index);
  return buf;
}

// Applies one `device` line's fields. Returns an error or "".
std::string apply_device_fields(const Fields& fields, DeviceConfig& d) {
  for (const auto& [key, value] : fields) {
    uint64_t n = 0;
    if (key == "name") {
      if (value.empty()) return "name is empty";
      d.name = value;
    } else if (key == "uuid") {
      if (!parse_uuid(value, d.uuid)) {
        return "uuid \"" + value + "\" is not GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx (hex digits)";
      }
      d.uuid_text = value;
    } else if (key == "memory_mib") {
      if (!parse_u64(value, n) || n == 0 || n > (1ull << 30)) return "memory_mib \"" + value + "\" is not a positive number";
      d.total_bytes = n * kMiB;
    } else if (key == "sms") {
      if (!parse_u64(value, n) || n == 0 || n > 100000) return "sms \"" + value + "\" is not a positive number";
      d.sms = static_cast<int>(n);
    } else if (key == "cc") {
      auto dot = value.find('.');
      uint64_t major = 0, minor = 0;
      if (dot == std::string::npos || !parse_u64(std::string_view(value).substr(0, dot), major) ||
          !parse_u64(std::string_view(value).substr(dot + 1), minor) || major == 0 || major > 99 || minor > 9) {
        return "cc \"" + value + "\" is not a compute capability such as 9.0";
      }
      d.cc_major = static_cast<int>(major);
      d.cc_minor = static_cast<int>(minor);
    } else if (key == "pci") {
      unsigned domain = 0, bus = 0, dev = 0, fn = 0;
      char tail = 0;
      if (std::sscanf(value.c_str(), "%x:%x:%x.%x%c", &domain, &bus, &dev, &fn, &tail) != 4) {
        return "pci \"" + value + "\" is not a bus id such as 0000:17:00.0";
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, "%04x:%02x:%02x.%x", domain, bus, dev, fn);
      d.pci_bus_id = buf;
    } else {
      return "unknown field \"" + key + "\" (known: name, uuid, memory_mib, sms, cc, pci)";
    }
  }
  return "";
}

std::string read_config_file(const char* path, std::vector<DeviceConfig>& devices, bool& missing) {
  std::ifstream in(path);
  if (!in) {
    missing = true;
    return "";
  }
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    std::string directive;
    Fields fields;
    std::string error = split_fields(line, directive, fields);
    if (error.empty() && directive.empty() && !fields.empty()) error = "a line must start with a directive";
    if (error.empty() && directive.empty()) continue;
    if (error.empty() && directive != "device") error = "unknown directive \"" + directive + "\" (expected device)";
    DeviceConfig d;
    if (error.empty()) error = apply_device_fields(fields, d);
    if (!error.empty()) return std::string(path) + ":" + std::to_string(line_no) + ": " + error + ": " + line;
    size_t index = devices.size();
    if (d.uuid_text.empty()) {
      d.uuid_text = default_uuid(index);
      parse_uuid(d.uuid_text, d.uuid);
    }
    for (const auto& other : devices) {
      if (std::memcmp(other.uuid.bytes, d.uuid.bytes, sizeof d.uuid.bytes) == 0) {
        return std::string(path) + ":" + std::to_string(line_no) + ": uuid " + d.uuid_text + " is used twice";
      }
    }
    if (d.pci_bus_id.empty()) {
      char buf[32];
      std::snprintf(buf, sizeof buf, "0000:%02zx:00.0", index + 1);
      d.pci_bus_id = buf;
    }
    devices.push_back(std::move(d));
  }
  return "";
}

bool env_u64(const char* name, uint64_t& out) {
  const char* v = std::getenv(name);
  if (!v || !*v) return true;
  if (!parse_u64(v, out)) {
    std::fprintf(stderr, "fake_cuda: %s=\"%s\" is not a whole number of microseconds\n", name, v);
    return false;
  }
  return true;
}

bool make_dirs(const std::string& dir) {
  std::string partial;
  for (size_t i = 0; i <= dir.size(); ++i) {
    if (i == dir.size() || (dir[i] == '/' && i > 0)) {
      partial = dir.substr(0, i);
      if (mkdir(partial.c_str(), 0700) != 0 && errno != EEXIST) return false;
    }
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// -- /proc ------------------------------------------------------------------------------------------

// Reads the state letter and start time of `pid`. 1: read; 0: no such process; -1: unreadable.
int read_stat(int pid, char& state, uint64_t& start_time) {
  char path[64];
  std::snprintf(path, sizeof path, "/proc/%d/stat", pid);
  int fd = open(path, O_RDONLY | O_CLOEXEC);
  if (fd < 0) return (errno == ENOENT || errno == ESRCH) ? 0 : -1;
  char buf[1024];
  ssize_t n = read(fd, buf, sizeof buf - 1);
  int saved = errno;
  close(fd);
  if (n <= 0) return (n < 0 && saved == ESRCH) ? 0 : -1;
  buf[n] = 0;
  const char* p = std::strrchr(buf, ')');
  if (!p) return -1;
  ++p;
  // Fields after the command: state is field 3, starttime field 22.
  int field = 2;
  while (*p && field < 22) {
    while (*p == ' ') ++p;
    ++field;
    const char* token = p;
    while (*p && *p != ' ') ++p;
    if (field == 3) state = *token;
    if (field == 22) {
      uint64_t v = 0;
      std::from_chars(token, p, v);
      start_time = v;
      return 1;
    }
  }
  return -1;
}

// The first 8 hex digits of this boot's id: CLOCK_MONOTONIC and /proc start times restart at boot,
// so a state file left by an earlier boot (a /tmp that survives reboots) must not be reused.
std::string boot_tag() {
  std::ifstream in("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(in, id);
  std::string tag;
  for (char c : id) {
    if (tag.size() == 8) break;
    if (std::isxdigit(static_cast<unsigned char>(c))) tag += c;
  }
  return tag.size() == 8 ? tag : "noboot00";
}

std::atomic<int> g_key_pid{0};
std::atomic<uint64_t> g_key{0};

}  // namespace

// -- configuration --------------------------------------------------------------------------------

bool parse_uuid(std::string_view text, CUuuid& out) {
  // GPU-xxxxxxxx-xxxx-xxxx-xxxx-xxxxxxxxxxxx
  if (text.size() != 40 || text.substr(0, 4) != "GPU-") return false;
  std::string_view hex = text.substr(4);
  static constexpr size_t kDashes[] = {8, 13, 18, 23};
  int byte = 0;
  size_t i = 0;
  while (i < hex.size()) {
    bool dash_here = false;
    for (size_t d : kDashes) dash_here |= (i == d);
    if (dash_here) {
      if (hex[i] != '-') return false;
      ++i;
      continue;
    }
    auto nibble = [](char c) -> int {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    if (i + 1 >= hex.size()) return false;
    int hi = nibble(hex[i]), lo = nibble(hex[i + 1]);
    if (hi < 0 || lo < 0 || byte >= 16) return false;
    out.bytes[byte++] = static_cast<char>(hi << 4 | lo);
    i += 2;
  }
  return byte == 16;
}

std::string format_uuid(const CUuuid& uuid) {
  std::string s = "GPU-";
  static const char* kHex = "0123456789abcdef";
  for (int i = 0; i < 16; ++i) {
    if (i == 4 || i == 6 || i == 8 || i == 10) s += '-';
    auto b = static_cast<unsigned char>(uuid.bytes[i]);
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

CUresult load_config(Config& out) {
  out = Config{};
  const char* path = std::getenv("FAKE_CUDA_CONFIG");
  if (path && *path) {
    bool missing = false;
    std::string error = read_config_file(path, out.devices, missing);
    if (!error.empty()) {
      std::fprintf(stderr, "fake_cuda: %s\n", error.c_str());
      return CUDA_ERROR_INVALID_VALUE;
    }
    if (missing) {
      std::fprintf(stderr, "fake_cuda: FAKE_CUDA_CONFIG=%s cannot be read; using one default device\n", path);
    } else if (out.devices.empty()) {
      std::fprintf(stderr, "fake_cuda: %s has no device lines: no device\n", path);
      return CUDA_ERROR_NO_DEVICE;
    }
  }
  if (out.devices.empty()) {
    DeviceConfig d;
    d.uuid_text = default_uuid(0);
    parse_uuid(d.uuid_text, d.uuid);
    d.pci_bus_id = "0000:01:00.0";
    out.devices.push_back(d);
  }
  if (!env_u64("FAKE_CUDA_ALLOC_DELAY_US", out.alloc_delay_us)) return CUDA_ERROR_INVALID_VALUE;
  uint64_t kernel_us = out.kernel_ns / 1000;
  if (!env_u64("FAKE_CUDA_KERNEL_US", kernel_us)) return CUDA_ERROR_INVALID_VALUE;
  out.kernel_ns = kernel_us * 1000;
  const char* dir = std::getenv("FAKE_CUDA_STATE_DIR");
  out.state_dir = (dir && *dir) ? dir : "/tmp/fake-cuda-" + std::to_string(getuid());
  return CUDA_SUCCESS;
}

// -- clock ----------------------------------------------------------------------------------------

void sleep_until_ns(uint64_t t) {
  timespec ts;
  ts.tv_sec = static_cast<time_t>(t / 1'000'000'000ull);
  ts.tv_nsec = static_cast<long>(t % 1'000'000'000ull);
  while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, nullptr) == EINTR) {
  }
}

void sleep_for_us(uint64_t us) {
  if (us > 0) sleep_until_ns(now_ns() + us * 1000);
}

// -- processes ------------------------------------------------------------------------------------

ProcessKey self_key() {
  int pid = getpid();
  if (g_key_pid.load(std::memory_order_acquire) == pid) return g_key.load(std::memory_order_relaxed);
  char state = 0;
  uint64_t start = 0;
  if (read_stat(pid, state, start) != 1) start = 0;
  ProcessKey key = (start << kPidBits) | static_cast<uint64_t>(pid);
  g_key.store(key, std::memory_order_relaxed);
  g_key_pid.store(pid, std::memory_order_release);
  return key;
}

bool process_alive(ProcessKey key) {
  if (key == kNoProcess || key == kClearing) return false;
  char state = 0;
  uint64_t start = 0;
  int r = read_stat(key_pid(key), state, start);
  if (r < 0) return true;  // cannot tell (e.g. hidepid): keep its memory counted
  if (r == 0) return false;
  return start == (key >> kPidBits) && state != 'Z' && state != 'X' && state != 'x';
}

// -- the shared state file ------------------------------------------------------------------------

SharedDevice* open_shared(const std::string& dir, const DeviceConfig& device, std::string& error) {
  if (!make_dirs(dir)) {
    error = "cannot create the state directory " + dir + ": " + std::strerror(errno);
    return nullptr;
  }
  static const std::string boot = boot_tag();
  const std::string path =
      dir + "/" + device.uuid_text + ".v" + std::to_string(kStateLayout) + "." + boot + ".state";
  const size_t size = sizeof(SharedDevice);
  int fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0 && errno == ENOENT) {
    // Build the file under a private name and link() it into place: link never replaces an
    // existing file, so of two processes starting at once one wins and the other opens its file.
    std::random_device rd;
    const std::string tmp = dir + "/." + device.uuid_text + "." + std::to_string(getpid()) + "." +
                            std::to_string(rd()) + ".tmp";
    // Readable and writable by every user, as a GPU's device node is: an agent running as root and
    // the jobs it runs as another user share one device.
    int tfd = open(tmp.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0666);
    if (tfd >= 0) fchmod(tfd, 0666);
    if (tfd < 0) {
      error = "cannot create " + tmp + ": " + std::strerror(errno);
      return nullptr;
    }
    void* p = MAP_FAILED;
    if (ftruncate(tfd, static_cast<off_t>(size)) == 0) {
      p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, tfd, 0);
    }
    if (p == MAP_FAILED) {
      error = "cannot size or map " + tmp + ": " + std::strerror(errno);
      close(tfd);
      unlink(tmp.c_str());
      return nullptr;
    }
    auto* s = new (p) SharedDevice();  // zero-filled file: every atomic starts at 0
    s->layout = kStateLayout;
    s->size = static_cast<uint32_t>(size);
    std::snprintf(s->uuid, sizeof s->uuid, "%s", device.uuid_text.c_str());
    s->total_bytes = device.total_bytes;
    s->magic = kStateMagic;
    munmap(p, size);
    int linked = link(tmp.c_str(), path.c_str());
    int saved = errno;
    unlink(tmp.c_str());
    close(tfd);
    if (linked == 0) {
      // Mapped through its own name, not the private one just unlinked: a process holding a
      // mapping of an unlinked file cannot be dumped by CRIU (as a job with its GPU is).
      fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    } else {
      if (saved != EEXIST) {
        error = "cannot link " + tmp + " to " + path + ": " + std::strerror(saved);
        return nullptr;
      }
      fd = open(path.c_str(), O_RDWR | O_CLOEXEC);
    }
  }
  if (fd < 0) {
    error = "cannot open " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  struct stat st;
  if (fstat(fd, &st) != 0 || static_cast<size_t>(st.st_size) != size) {
    error = path + " has another size than this build's state layout; delete it";
    close(fd);
    return nullptr;
  }
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    error = "cannot map " + path + ": " + std::strerror(errno);
    return nullptr;
  }
  auto* s = static_cast<SharedDevice*>(p);
  if (s->magic != kStateMagic || s->layout != kStateLayout || s->size != size) {
    error = path + " is not a fake_cuda state file of this layout; delete it";
    munmap(p, size);
    return nullptr;
  }
  return s;
}

void close_shared(SharedDevice* shared) {
  if (shared) munmap(shared, sizeof(SharedDevice));
}

ProcessRow* claim_row(SharedDevice& shared, ProcessKey self) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (auto& row : shared.rows) {
      uint64_t expected = kNoProcess;
      if (row.owner.load(std::memory_order_relaxed) == kNoProcess &&
          row.owner.compare_exchange_strong(expected, self, std::memory_order_acq_rel)) {
        row.used_bytes.store(0, std::memory_order_relaxed);
        row.busy_ns.store(0, std::memory_order_relaxed);
        row.launches.store(0, std::memory_order_relaxed);
        return &row;
      }
    }
    sweep(shared, self);
  }
  return nullptr;
}

void release_row(ProcessRow& row) {
  row.used_bytes.store(0, std::memory_order_relaxed);
  row.busy_ns.store(0, std::memory_order_relaxed);
  row.launches.store(0, std::memory_order_relaxed);
  row.owner.store(kNoProcess, std::memory_order_release);
}

void sweep(SharedDevice& shared, ProcessKey self) {
  for (auto& row : shared.rows) {
    uint64_t owner = row.owner.load(std::memory_order_acquire);
    if (owner == kNoProcess || owner == kClearing || owner == self || process_alive(owner)) continue;
    // Only the sweeper that wins this exchange empties the row; a new owner can claim it only
    // once it is kNoProcess again, so nobody's fresh counts are overwritten.
    if (!row.owner.compare_exchange_strong(owner, kClearing, std::memory_order_acq_rel)) continue;
    row.used_bytes.store(0, std::memory_order_relaxed);
    row.busy_ns.store(0, std::memory_order_relaxed);
    row.launches.store(0, std::memory_order_relaxed);
    row.owner.store(kNoProcess, std::memory_order_release);
  }
  for (auto& slot : shared.events) {
    uint64_t owner = slot.owner.load(std::memory_order_acquire);
    if (owner == kNoProcess || owner == self || process_alive(owner)) continue;
    slot.owner.compare_exchange_strong(owner, kNoProcess, std::memory_order_acq_rel);
  }
}

uint64_t used_bytes(const SharedDevice& shared) {
  uint64_t sum = 0;
  for (const auto& row : shared.rows) {
    uint64_t owner = row.owner.load(std::memory_order_acquire);
    if (owner == kNoProcess || owner == kClearing) continue;
    sum += row.used_bytes.load(std::memory_order_acquire);
  }
  return sum;
}

bool charge(SharedDevice& shared, ProcessRow& row, ProcessKey self, uint64_t total, uint64_t bytes) {
  // Count first, then look: a process killed at any instant leaves only its own row's counts,
  // which die with it.
  row.used_bytes.fetch_add(bytes, std::memory_order_acq_rel);
  if (used_bytes(shared) <= total) return true;
  sweep(shared, self);
  if (used_bytes(shared) <= total) return true;
  row.used_bytes.fetch_sub(bytes, std::memory_order_acq_rel);
  return false;
}

void uncharge(ProcessRow& row, uint64_t bytes) { row.used_bytes.fetch_sub(bytes, std::memory_order_acq_rel); }

int claim_event_slot(SharedDevice& shared, ProcessKey self) {
  for (int attempt = 0; attempt < 2; ++attempt) {
    for (int i = 0; i < kMaxIpcEvents; ++i) {
      auto& slot = shared.events[i];
      uint64_t expected = kNoProcess;
      if (slot.owner.load(std::memory_order_relaxed) == kNoProcess &&
          slot.owner.compare_exchange_strong(expected, self, std::memory_order_acq_rel)) {
        slot.done_ns.store(0, std::memory_order_relaxed);
        slot.generation.fetch_add(1, std::memory_order_acq_rel);
        return i;
      }
    }
    sweep(shared, self);
  }
  return -1;
}

void release_event_slot(SharedDevice& shared, int index) {
  if (index < 0 || index >= kMaxIpcEvents) return;
  shared.events[index].generation.fetch_add(1, std::memory_order_acq_rel);
  shared.events[index].owner.store(kNoProcess, std::memory_order_release);
}

}  // namespace cnlab::fake_cuda

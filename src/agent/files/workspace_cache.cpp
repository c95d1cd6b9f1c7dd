#include "agent/files/workspace_cache.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <condition_variable>
#include <exception>
#include <map>
#include <mutex>
#include <optional>

#include <fmt/format.h>

#include "agent/files/digest.h"
#include "agent/files/fs_util.h"
#include "agent/files/unique_fd.h"
#include "model/workspace.h"

namespace cnlab::agent {
namespace {

constexpr std::string_view kSuffix = ".tar.gz";
constexpr const char* kIncoming = ".incoming";

bool is_hex64(std::string_view text) {
  return text.size() == 64 &&
         std::all_of(text.begin(), text.end(), [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); });
}

}  // namespace

struct WorkspaceCache::State {
  enum class Phase { kFetching, kReady, kFailed };
  struct Entry {
    Phase phase = Phase::kFetching;
    int64_t size = 0;
    uint64_t last_used = 0;
    int pins = 0;
    std::optional<Error> error;  // kFailed: what every waiter returns
  };

  std::string dir;
  int64_t max_bytes = 0;
  mutable std::mutex mu;
  std::condition_variable fetched;
  bool loaded = false;
  std::map<std::string, std::shared_ptr<Entry>> entries;  // by hex
  int64_t total_bytes = 0;
  uint64_t tick = 0;
  uint64_t temp_counter = 0;
  int64_t hits = 0;
  int64_t fetches = 0;

  std::string path_of(const std::string& hex) const { return dir + "/" + hex + std::string(kSuffix); }

  // Creates the directory, empties .incoming, and indexes the archives already there.
  Status load_locked() {
    if (loaded) return Status::ok();
    for (const std::string& d : {dir, dir + "/" + kIncoming}) {
      if (::mkdir(d.c_str(), 0700) != 0 && errno != EEXIST) {
        return Error::internal(fmt::format("create the workspace cache directory {}: {}", d, errno_text(errno)));
      }
    }
    UniqueFd incoming = detail::open_directory_at(AT_FDCWD, (dir + "/" + kIncoming).c_str());
    if (!incoming.ok()) {
      return Error::internal(fmt::format("open {}/{}: {}", dir, kIncoming, errno_text(errno)));
    }
    if (auto s = detail::remove_directory_contents(incoming.get(), dir + "/" + kIncoming); !s) return s;
    UniqueFd root = detail::open_directory_at(AT_FDCWD, dir.c_str());
    std::vector<std::string> names;
    if (!root.ok() || !detail::list_directory(root.get(), &names)) {
      return Error::internal(fmt::format("list the workspace cache {}: {}", dir, errno_text(errno)));
    }
    std::vector<std::pair<int64_t, std::string>> found;  // (mtime, hex)
    for (const std::string& name : names) {
      std::string_view view = name;
      if (!view.ends_with(kSuffix) || !is_hex64(view.substr(0, view.size() - kSuffix.size()))) continue;
      struct stat st {};
      if (::fstatat(root.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0 || !S_ISREG(st.st_mode)) continue;
      std::string hex(view.substr(0, view.size() - kSuffix.size()));
      auto entry = std::make_shared<Entry>();
      entry->phase = Phase::kReady;
      entry->size = st.st_size;
      entries[hex] = entry;
      total_bytes += st.st_size;
      found.emplace_back(static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec, hex);
    }
    std::sort(found.begin(), found.end());
    for (const auto& [mtime, hex] : found) entries[hex]->last_used = ++tick;
    loaded = true;
    evict_locked();
    return Status::ok();
  }

  // Least recently used first, skipping archives in use or still downloading.
  void evict_locked() {
    while (total_bytes > max_bytes) {
      auto victim = entries.end();
      for (auto it = entries.begin(); it != entries.end(); ++it) {
        const Entry& e = *it->second;
        if (e.phase != Phase::kReady || e.pins > 0) continue;
        if (victim == entries.end() || e.last_used < victim->second->last_used) victim = it;
      }
      if (victim == entries.end()) return;
      ::unlink(path_of(victim->first).c_str());
      total_bytes -= victim->second->size;
      entries.erase(victim);
    }
  }

  void unpin(const std::shared_ptr<Entry>& entry) {
    std::lock_guard lock(mu);
    --entry->pins;
    if (entry->pins == 0) evict_locked();
  }
};

// One hold on an entry (counted in Entry::pins); released once, when the last CachedWorkspace
// sharing it goes away.
struct CachedWorkspace::Pin {
  Pin(std::shared_ptr<WorkspaceCache::State> s, std::shared_ptr<WorkspaceCache::State::Entry> e)
      : state(std::move(s)), entry(std::move(e)) {}
  Pin(const Pin&) = delete;
  Pin& operator=(const Pin&) = delete;
  ~Pin() { state->unpin(entry); }

  std::shared_ptr<WorkspaceCache::State> state;
  std::shared_ptr<WorkspaceCache::State::Entry> entry;
};

CachedWorkspace::CachedWorkspace(std::shared_ptr<Pin> pin, std::string digest, std::string path, int64_t size,
                                 bool fetched)
    : pin_(std::move(pin)), digest_(std::move(digest)), path_(std::move(path)), size_bytes_(size), fetched_(fetched) {}
CachedWorkspace::CachedWorkspace(CachedWorkspace&&) noexcept = default;
CachedWorkspace& CachedWorkspace::operator=(CachedWorkspace&&) noexcept = default;
CachedWorkspace::~CachedWorkspace() = default;

WorkspaceCache::WorkspaceCache(std::string cache_dir, int64_t max_bytes) : state_(std::make_shared<State>()) {
  while (cache_dir.size() > 1 && cache_dir.ends_with('/')) cache_dir.pop_back();
  state_->dir = std::move(cache_dir);
  state_->max_bytes = max_bytes;
}

WorkspaceCache::~WorkspaceCache() = default;

Result<CachedWorkspace> WorkspaceCache::get_or_fetch(const std::string& digest, const FetchFn& fetch) {
  if (auto valid = model::validate_digest(digest, "digest"); !valid) return valid.error();
  const std::string hex = model::workspace_name(digest);
  State& s = *state_;
  auto lease = [&](const std::shared_ptr<State::Entry>& entry, bool fetched) {
    // Called with the lock held and the entry already pinned.
    return CachedWorkspace(std::make_shared<CachedWorkspace::Pin>(state_, entry), digest,
                           s.path_of(hex), entry->size, fetched);
  };

  std::unique_lock lock(s.mu);
  if (auto loaded = s.load_locked(); !loaded) return loaded.error();
  std::shared_ptr<State::Entry> entry;
  while (true) {
    auto it = s.entries.find(hex);
    if (it == s.entries.end()) break;
    entry = it->second;
    if (entry->phase == State::Phase::kReady) {
      ++entry->pins;
      entry->last_used = ++s.tick;
      ++s.hits;
      CachedWorkspace held = lease(entry, /*fetched=*/false);
      lock.unlock();
      ::utimensat(AT_FDCWD, held.archive_path().c_str(), nullptr, 0);  // the LRU order survives a restart
      return held;
    }
    s.fetched.wait(lock, [&] { return entry->phase != State::Phase::kFetching; });
    if (entry->phase == State::Phase::kFailed) return *entry->error;
    // Ready: take it on the next turn (unless it was evicted meanwhile; then fetch it again).
  }

  // This caller downloads; others for the same digest wait on `entry`.
  entry = std::make_shared<State::Entry>();
  entry->pins = 1;
  s.entries[hex] = entry;
  std::string temp = fmt::format("{}/{}/{}.{}.{}", s.dir, kIncoming, hex, ::getpid(), ++s.temp_counter);
  lock.unlock();

  auto download = [&]() -> Result<int64_t> {
    Status fetched = Status::ok();
    try {
      fetched = fetch(temp);
    } catch (const std::exception& e) {
      fetched = Error::internal(fmt::format("fetching workspace {} threw: {}", digest, e.what()));
    } catch (...) {
      fetched = Error::internal(fmt::format("fetching workspace {} threw", digest));
    }
    if (!fetched) return fetched.error();
    struct stat st {};
    if (::lstat(temp.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
      return Error::internal(fmt::format("fetching workspace {} reported success but wrote no file at {}", digest, temp));
    }
    if (auto verified = verify_digest(temp, digest); !verified) return verified.error();
    if (::rename(temp.c_str(), s.path_of(hex).c_str()) != 0) {
      return Error::internal(fmt::format("store the workspace archive {}: {}", s.path_of(hex), errno_text(errno)));
    }
    return static_cast<int64_t>(st.st_size);
  };
  Result<int64_t> size = download();
  if (!size) ::unlink(temp.c_str());

  lock.lock();
  if (!size) {
    entry->phase = State::Phase::kFailed;
    entry->error = size.error();
    s.entries.erase(hex);
    s.fetched.notify_all();
    return size.error();
  }
  entry->phase = State::Phase::kReady;
  entry->size = *size;
  entry->last_used = ++s.tick;
  s.total_bytes += *size;
  ++s.fetches;
  s.fetched.notify_all();
  CachedWorkspace held = lease(entry, /*fetched=*/true);  // takes over the download's pin
  s.evict_locked();
  return held;
}

Result<UnpackResult> WorkspaceCache::unpack_to(const std::string& digest, const FetchFn& fetch,
                                               const std::string& dest_dir, const UnpackLimits& limits) {
  auto held = get_or_fetch(digest, fetch);
  if (!held) return held.error();
  return extract_workspace(held->archive_path(), dest_dir, limits);
}

WorkspaceCache::Stats WorkspaceCache::stats() const {
  std::lock_guard lock(state_->mu);
  int64_t ready = 0;
  for (const auto& [hex, entry] : state_->entries) ready += entry->phase == State::Phase::kReady ? 1 : 0;
  return {ready, state_->total_bytes, state_->hits, state_->fetches};
}

}  // namespace cnlab::agent

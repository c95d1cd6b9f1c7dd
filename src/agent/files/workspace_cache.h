// WorkspaceCache: workspace archives kept on the node by digest, so a job whose workspace an
// earlier job used starts without a download.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "agent/files/workspace_unpack.h"
#include "common/result.h"

namespace cnlab::agent {

// A cached archive held for use: while any CachedWorkspace for a digest is alive, that archive is
// never evicted. Movable, not copyable; may outlive the WorkspaceCache that made it.
class CachedWorkspace {
 public:
  CachedWorkspace(CachedWorkspace&&) noexcept;
  CachedWorkspace& operator=(CachedWorkspace&&) noexcept;
  ~CachedWorkspace();

  const std::string& digest() const { return digest_; }
  const std::string& archive_path() const { return path_; }
  int64_t size_bytes() const { return size_bytes_; }
  // Whether this call downloaded it (false: it was in the cache, or another caller's download of
  // the same digest served it).
  bool fetched() const { return fetched_; }

 private:
  friend class WorkspaceCache;
  struct Pin;
  CachedWorkspace(std::shared_ptr<Pin> pin, std::string digest, std::string path, int64_t size, bool fetched);

  std::shared_ptr<Pin> pin_;
  std::string digest_;
  std::string path_;
  int64_t size_bytes_ = 0;
  bool fetched_ = false;
};

// Layout: `cache_dir/<64 hex>.tar.gz`, one archive per digest, put there (renamed, whole) only
// after its digest was verified, so what is there is trusted without hashing it again;
// `cache_dir/.incoming/` holds downloads in progress (emptied when the cache is first used, which
// clears what a crashed agent left). Archives found in `cache_dir` are used, least recently used
// first by modification time (a hit touches it).
// Thread-safe. Concurrent callers for one digest share one download; different digests download
// in parallel. The cache directory should be the agent's alone (mode 0700, created so).
class WorkspaceCache {
 public:
  // Downloads the archive into `temp_path` (creating or truncating it). Called without any lock
  // held; an exception from it is caught and returned as kInternal.
  using FetchFn = std::function<Status(const std::string& temp_path)>;

  struct Stats {
    int64_t archives = 0;
    int64_t bytes = 0;
    int64_t hits = 0;     // get_or_fetch calls served without a download of their own
    int64_t fetches = 0;  // downloads that were verified and kept
  };

  // No I/O here: the directory is created and scanned by the first call that needs it, and its
  // errors are that call's. `max_bytes` bounds the archives kept; over it, the least recently used
  // archives not in use are removed. One archive in use may keep the cache over it.
  WorkspaceCache(std::string cache_dir, int64_t max_bytes);
  ~WorkspaceCache();
  WorkspaceCache(const WorkspaceCache&) = delete;
  WorkspaceCache& operator=(const WorkspaceCache&) = delete;

  // The archive of `digest`, from the cache or fetched with `fetch` and verified. Errors: kInvalid-
  // Argument naming "digest" for a malformed digest or a download with another digest (not kept);
  // the error `fetch` returned; kInternal for the cache directory's I/O. A failed download is
  // every waiting caller's error; the next call tries again.
  Result<CachedWorkspace> get_or_fetch(const std::string& digest, const FetchFn& fetch);

  // get_or_fetch, then extract_workspace into `dest_dir` (no second digest check: the cached copy
  // was verified when it was stored).
  Result<UnpackResult> unpack_to(const std::string& digest, const FetchFn& fetch, const std::string& dest_dir,
                                 const UnpackLimits& limits = {});

  Stats stats() const;

 private:
  friend class CachedWorkspace;
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace cnlab::agent

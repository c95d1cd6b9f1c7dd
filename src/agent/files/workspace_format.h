// What a workspace archive is, for the CLI that packs it and the agent that unpacks it.
//
// A gzip-compressed POSIX pax tar ("restricted" pax: ustar headers, pax extended headers only for
// long or non-ASCII names; names stored as raw bytes); a migration's dump is a plain one
// (PackOptions::compression_level 0), and unpacking takes either. Entries are the workspace's directories,
// regular files and symbolic links whose targets stay inside it, in byte order of their paths,
// relative ("src/train.py"), with mode bits 0777 only, mtime 0, uid/gid 0 and no user or group
// names, and a gzip header without a timestamp: the same directory always gives the same bytes,
// hence the same digest, and the CLI uploads it once.
#pragma once

#include <cstdint>
#include <string>

namespace cnlab::agent {

// Limits the CLI packs under and the agent unpacks under by default: both count the same things
// (bytes of regular files; archive entries of any type), so an archive the CLI made is never
// refused by an agent with default limits.
inline constexpr int64_t kDefaultMaxWorkspaceBytes = int64_t{1} << 30;  // 1 GiB of file contents
inline constexpr int64_t kDefaultMaxWorkspaceEntries = 100'000;
// The server's limit on one upload (src/server/server.h, max_upload_bytes).
inline constexpr int64_t kDefaultMaxArchiveBytes = int64_t{512} << 20;

// A path left out of a workspace or an artifact upload, and why, for the user.
struct SkippedPath {
  std::string path;    // relative to the directory walked
  std::string reason;  // "a symbolic link to \"/etc/passwd\"; links are not followed"

  bool operator==(const SkippedPath&) const = default;
};

}  // namespace cnlab::agent

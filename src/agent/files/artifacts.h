// collect_artifacts: what the agent uploads from a job's artifact directory after it exits, and
// what it leaves behind and why (so the user is told, not left guessing).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "agent/files/unique_fd.h"
#include "agent/files/workspace_format.h"
#include "common/result.h"

namespace cnlab::agent {

// Defaults are the server's own limits (src/server/server.h, artifacts_api.cpp): files it keeps per
// job, bytes per job, bytes per upload. Uploading more would only be refused there.
struct ArtifactLimits {
  int64_t max_files = 10'000;
  int64_t max_total_bytes = int64_t{1} << 30;
  int64_t max_file_bytes = int64_t{512} << 20;
  size_t max_skipped_listed = 1000;  // skipped paths listed in detail; the rest are counted only
};

struct Artifact {
  std::string path;           // relative to the directory, '/'-separated: the upload's path
  std::string absolute_path;  // for messages; read it with open_artifact, which follows no link
  int64_t size_bytes = 0;

  bool operator==(const Artifact&) const = default;
};

struct ArtifactSet {
  std::vector<Artifact> files;  // to upload: depth-first, names in byte order
  int64_t total_bytes = 0;      // of `files`
  std::vector<SkippedPath> skipped;  // at most limits.max_skipped_listed, in walk order
  int64_t skipped_count = 0;         // all skipped paths (a skipped directory counts once)
};

// Every regular file under `dir`, walked with openat/fstatat and never through a symbolic link.
// Left out, each with its reason in `skipped`: symbolic links (with their target), devices, fifos
// and sockets; paths the server refuses (artifact path rules: 1..4096 bytes, at most 32 segments,
// no empty/"."/".." segment, no NUL or backslash) — a directory whose path already breaks them is
// skipped whole, without walking it; directories that cannot be read; files over
// limits.max_file_bytes; and, in walk order, files past limits.max_files or that would bring the
// total past limits.max_total_bytes (a smaller file later on may still fit, and is taken).
// Errors only when `dir` itself cannot be walked: kNotFound naming "dir" when it does not exist
// (no artifacts at all is an empty set for an existing empty directory), kInvalidArgument when it
// is not a directory (a link to one included), kInternal otherwise.
Result<ArtifactSet> collect_artifacts(const std::string& dir, const ArtifactLimits& limits = {});

// Opens the regular file `relative_path` below `dir` for reading, one component at a time without
// following a symbolic link, so a link swapped in after collect_artifacts is refused rather than
// read. kInvalidArgument naming "path" when the path breaks the artifact path rules; kNotFound when
// it is not (or no longer) a regular file reachable without links.
Result<UniqueFd> open_artifact(const std::string& dir, std::string_view relative_path);

}  // namespace cnlab::agent

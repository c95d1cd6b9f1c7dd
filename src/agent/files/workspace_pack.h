// pack_workspace: a job's directory as a deterministic workspace archive (workspace_format.h).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/files/workspace_format.h"
#include "common/result.h"

namespace cnlab::agent {

struct PackOptions {
  std::string output_path;  // required: created or truncated; removed again when packing fails
  int64_t max_content_bytes = kDefaultMaxWorkspaceBytes;  // sum of the regular files' sizes
  int64_t max_entries = kDefaultMaxWorkspaceEntries;      // files, directories and links
  // The compressed archive: the server takes uploads of at most 512 MiB (ServerConfig::
  // max_upload_bytes); failing here says why in terms of the workspace, not an HTTP 413.
  int64_t max_archive_bytes = kDefaultMaxArchiveBytes;
  // Whether `.git` and what ignore files name are left out (a workspace); false packs every file,
  // link and directory there is (a job's checkpoint directory).
  bool workspace_rules = true;
  // gzip's level, 1 to 9: 6 makes the smallest archive worth its time for an upload kept on the
  // server. 0 writes a plain tar, no gzip at all: for a process dump sent at once, whose pause must
  // not be spent compressing memory (zlib manages 50 to 150 MB/s even at its fastest levels, where
  // the copy and SHA-256 run at over 1 GB/s).
  int compression_level = 6;
};

struct PackResult {
  std::string archive_path;
  std::string digest;          // "sha256:<64 hex>" of the archive's bytes
  int64_t archive_bytes = 0;   // compressed, as uploaded
  int64_t content_bytes = 0;   // sum of the regular files' sizes
  int64_t file_count = 0;      // regular files
  int64_t entry_count = 0;     // files, directories and links
  std::vector<SkippedPath> skipped;  // left out though not ignored (links leaving the directory, fifos, ...)
};

// Packs `dir` into options.output_path. Leaves out `.git` (a directory or a file, at any depth) and
// what .gitignore and .cnlabignore files say (ignore_rules.h; ignore files that are symbolic links
// are not read, as in git) unless options.workspace_rules is false, always the output file
// itself, and reports in `skipped`: symbolic links whose
// target could resolve outside `dir` (absolute, or climbing above it), sockets, fifos and devices.
// Files keep their permission bits (the exec bit matters); setuid, setgid and sticky bits are
// dropped.
// Errors: kInvalidArgument naming "dir" when it is not a directory; kTooLarge naming "dir" when the
// files add up to more than max_content_bytes (the message gives both numbers and the 5 biggest
// files), when there are more than max_entries entries, or when the compressed archive is over
// max_archive_bytes; kInternal for I/O errors, naming the path.
// Thread-compatible: no state is shared between calls.
Result<PackResult> pack_workspace(const std::string& dir, const PackOptions& options);

}  // namespace cnlab::agent

// unpack_workspace: a workspace archive, checked, into a job's directory.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "agent/files/workspace_format.h"
#include "common/result.h"

namespace cnlab::agent {

struct UnpackLimits {
  int64_t max_content_bytes = kDefaultMaxWorkspaceBytes;  // bytes written to files, counted as written
  int64_t max_entries = kDefaultMaxWorkspaceEntries;      // headers of any type
};

struct UnpackResult {
  int64_t entry_count = 0;
  int64_t file_count = 0;     // regular files and hard links
  int64_t content_bytes = 0;  // bytes written to files (holes of sparse files included)
};

// Verifies that `archive_file` has `expected_digest` (digest.h), then extract_workspace.
Result<UnpackResult> unpack_workspace(const std::string& archive_file, std::string_view expected_digest,
                                      const std::string& dest_dir, const UnpackLimits& limits = {});

// Extracts a gzip-compressed or plain tar archive (any other format is refused, naming what it
// looks like) into `dest_dir`, which must be absent (it is created, mode 0755, its parent must
// exist) or an empty directory. Nothing is ever written outside `dest_dir`: every directory on the
// way to an entry is opened relative to it, one component at a time, never through a symbolic link,
// and files are created exclusively (an entry that appears twice is refused).
// Refused, with kInvalidArgument naming "archive entry", the entry's path and the rule: absolute
// paths; ".." segments; symbolic links whose target could leave `dest_dir`
// (path_rules.h: absolute, or ".." beyond the link's depth or after a name); an entry under an
// earlier symbolic link or file; hard links to anything but a regular file extracted earlier from
// the same archive; devices, fifos and sockets; setuid and setgid bits. kTooLarge when the archive
// has more than limits.max_entries entries, or writing an entry would bring the files past
// limits.max_content_bytes (bytes are counted as they are written, so a small archive that
// inflates to much more is stopped at the limit). Sticky bits are dropped; directories always keep
// rwx for their owner (so the job and the agent can work in them); owners and times are not
// restored (files belong to the agent's user, with the time of extraction).
// On any error `dest_dir` is left as found: removed when this call created it, emptied otherwise.
// Thread-safe: it uses no process-wide state (no chdir, unlike libarchive's own extraction).
Result<UnpackResult> extract_workspace(const std::string& archive_file, const std::string& dest_dir,
                                       const UnpackLimits& limits = {});

}  // namespace cnlab::agent

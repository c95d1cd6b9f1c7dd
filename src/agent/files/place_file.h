// place_file: a file from outside a directory moved to a path inside it that another node named,
// never through a symbolic link (the parts of a migration dump put back where the source took
// them from, peer_endpoint.h).
#pragma once

#include <sys/types.h>

#include <string>

#include "common/result.h"

namespace cnlab::agent {

// Moves the regular file `file` (on the file system of `dest_dir`; a rename, not a copy) to
// `rel_path` inside `dest_dir`, with the permission bits `mode & 0777`. Every directory on the
// way must already exist as a real directory: each is opened relative to the one before with
// O_NOFOLLOW, so a symbolic link anywhere in `rel_path` is refused, and nothing may be at
// `rel_path` yet (the rename never replaces).
// Errors: kInvalidArgument naming "path" when `rel_path` is empty, absolute or has an empty, "."
// or ".." segment, when a directory on the way is missing, a link or not a directory, or when
// something is there already; kInvalidArgument naming "file" when `file` is not a regular file;
// kInternal for other I/O errors. `file` stays where it was on any error.
Status place_file(const std::string& file, const std::string& dest_dir, const std::string& rel_path, mode_t mode);

}  // namespace cnlab::agent

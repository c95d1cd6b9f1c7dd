#include "agent/files/place_file.h"

#include <fcntl.h>
#include <stdio.h>
#include <sys/stat.h>

#include <cerrno>

#include <fmt/format.h>

#include "agent/files/fs_util.h"
#include "agent/files/path_rules.h"
#include "agent/files/unique_fd.h"

namespace cnlab::agent {

Status place_file(const std::string& file, const std::string& dest_dir, const std::string& rel_path, mode_t mode) {
  const std::string shown_path = detail::shown(rel_path);
  std::string problem;
  auto clean = detail::clean_entry_path(rel_path, &problem);
  if (!clean) return Error::invalid_argument("path", shown_path, "it " + problem);
  if (clean->empty() || *clean != rel_path) {
    return Error::invalid_argument("path", shown_path, "a relative path to a file, as a/b/c");
  }
  struct stat st {};
  if (::lstat(file.c_str(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::invalid_argument("file", file, "not a regular file");
  }
  UniqueFd dir = detail::open_directory_at(AT_FDCWD, dest_dir.c_str());
  if (!dir.ok()) return Error::internal(fmt::format("open {}: {}", dest_dir, errno_text(errno)));
  auto segments = detail::path_segments(*clean);
  const std::string leaf(segments.back());
  segments.pop_back();
  for (std::string_view segment : segments) {
    const std::string name(segment);
    UniqueFd next = detail::open_directory_at(dir.get(), name.c_str());
    if (!next.ok()) {
      return Error::invalid_argument("path", shown_path,
                                     fmt::format("\"{}\" on the way is not a directory there ({})", detail::shown(name),
                                                 errno_text(errno)));
    }
    dir = std::move(next);
  }
  if (::chmod(file.c_str(), mode & 0777) != 0) return Error::internal(fmt::format("chmod {}: {}", file, errno_text(errno)));
  if (::renameat2(AT_FDCWD, file.c_str(), dir.get(), leaf.c_str(), RENAME_NOREPLACE) != 0) {
    const int error = errno;
    if (error == EEXIST) return Error::invalid_argument("path", shown_path, "something is there already");
    return Error::internal(fmt::format("move {} to {}/{}: {}", file, dest_dir, shown_path, errno_text(error)));
  }
  return Status::ok();
}

}  // namespace cnlab::agent

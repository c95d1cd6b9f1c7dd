#include "agent/files/artifacts.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include <fmt/format.h>

#include "agent/files/fs_util.h"
#include "agent/files/path_rules.h"

namespace cnlab::agent {
namespace {

using detail::human_bytes;

class Collector {
 public:
  Collector(std::string root, const ArtifactLimits& limits) : root_(std::move(root)), limits_(limits) {}

  Status walk(int dir_fd, const std::string& rel_dir, size_t depth) {
    std::vector<std::string> names;
    if (!detail::list_directory(dir_fd, &names)) {
      int error = errno;
      if (rel_dir.empty()) return Error::internal(fmt::format("list {}: {}", root_, errno_text(error)));
      skip(rel_dir, "a directory that cannot be read (" + errno_text(error) + ")");
      return Status::ok();
    }
    for (const std::string& name : names) {
      std::string rel = rel_dir.empty() ? name : rel_dir + "/" + name;
      struct stat st {};
      if (::fstatat(dir_fd, name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
        if (errno != ENOENT) skip(rel, "cannot be examined (" + errno_text(errno) + ")");
        continue;
      }
      if (S_ISLNK(st.st_mode)) {
        skip(rel, fmt::format("a symbolic link (to \"{}\"); links are not followed", detail::shown(link_target(dir_fd, name))));
        continue;
      }
      if (!S_ISDIR(st.st_mode) && !S_ISREG(st.st_mode)) {
        skip(rel, detail::kind_of(st.st_mode) + "; only regular files are uploaded");
        continue;
      }
      if (auto problem = detail::upload_path_problem(rel)) {
        // A directory's own path already broken (a backslash, too long) breaks every path below it.
        skip(rel, fmt::format("{}its path {}, which the server refuses", S_ISDIR(st.st_mode) ? "a directory: " : "",
                              *problem));
        continue;
      }
      if (S_ISDIR(st.st_mode)) {
        if (depth + 1 >= detail::kMaxUploadPathSegments) {
          skip(rel, fmt::format("a directory {} levels deep; artifact paths have at most {} segments, so nothing "
                                "below it is uploaded",
                                depth + 1, detail::kMaxUploadPathSegments));
          continue;
        }
        UniqueFd child = detail::open_directory_at(dir_fd, name.c_str());
        if (!child.ok()) {
          skip(rel, "a directory that cannot be opened (" + errno_text(errno) + ")");
          continue;
        }
        if (auto s = walk(child.get(), rel, depth + 1); !s) return s;
        continue;
      }
      take(rel, static_cast<int64_t>(st.st_size));
    }
    return Status::ok();
  }

  ArtifactSet& result() { return result_; }

 private:
  void take(const std::string& rel, int64_t size) {
    if (size > limits_.max_file_bytes) {
      skip(rel, fmt::format("{}, over the limit of {} for one file", human_bytes(size), human_bytes(limits_.max_file_bytes)));
      return;
    }
    if (static_cast<int64_t>(result_.files.size()) >= limits_.max_files) {
      skip(rel, fmt::format("past the limit of {} files per job", limits_.max_files));
      return;
    }
    if (size > limits_.max_total_bytes - result_.total_bytes) {
      skip(rel, fmt::format("{}, which would bring the job's artifacts to {}, over the limit of {}", human_bytes(size),
                            human_bytes(result_.total_bytes + size), human_bytes(limits_.max_total_bytes)));
      return;
    }
    result_.files.push_back({rel, root_ + "/" + rel, size});
    result_.total_bytes += size;
  }

  void skip(const std::string& rel, std::string reason) {
    ++result_.skipped_count;
    if (result_.skipped.size() < limits_.max_skipped_listed) result_.skipped.push_back({rel, std::move(reason)});
  }

  static std::string link_target(int dir_fd, const std::string& name) {
    char buffer[4096];
    ssize_t n = ::readlinkat(dir_fd, name.c_str(), buffer, sizeof buffer);
    return n < 0 ? std::string("?") : std::string(buffer, static_cast<size_t>(n));
  }

  std::string root_;
  ArtifactLimits limits_;
  ArtifactSet result_;
};

}  // namespace

Result<ArtifactSet> collect_artifacts(const std::string& dir, const ArtifactLimits& limits) {
  UniqueFd root = detail::open_directory_at(AT_FDCWD, dir.c_str());
  if (!root.ok()) {
    int error = errno;
    if (error == ENOENT) return Error::not_found("dir", dir, "no such directory");
    if (error == ENOTDIR || error == ELOOP) {
      return Error::invalid_argument("dir", dir, "not a directory (a symbolic link is not followed)");
    }
    return Error::internal(fmt::format("open {}: {}", dir, errno_text(error)));
  }
  std::string shown_root = dir;
  while (shown_root.size() > 1 && shown_root.ends_with('/')) shown_root.pop_back();
  Collector collector(shown_root, limits);
  if (auto s = collector.walk(root.get(), "", 0); !s) return s.error();
  return std::move(collector.result());
}

Result<UniqueFd> open_artifact(const std::string& dir, std::string_view relative_path) {
  if (auto problem = detail::upload_path_problem(relative_path)) {
    return Error::invalid_argument("path", detail::shown(relative_path), "an artifact path that " + *problem);
  }
  UniqueFd current = detail::open_directory_at(AT_FDCWD, dir.c_str());
  if (!current.ok()) return Error::not_found("dir", dir, "no such directory (" + errno_text(errno) + ")");
  auto parts = detail::path_segments(relative_path);
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    UniqueFd next = detail::open_directory_at(current.get(), std::string(parts[i]).c_str());
    if (!next.ok()) {
      return Error::not_found("path", std::string(relative_path),
                              "not reachable without following a symbolic link (" + errno_text(errno) + ")");
    }
    current = std::move(next);
  }
  // O_NONBLOCK: a fifo swapped in must not hang the uploader; it is refused just below.
  UniqueFd file(::openat(current.get(), std::string(parts.back()).c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC));
  struct stat st {};
  if (!file.ok() || ::fstat(file.get(), &st) != 0 || !S_ISREG(st.st_mode)) {
    return Error::not_found("path", std::string(relative_path), "not a regular file (links are not followed)");
  }
  // Reads should block normally again.
  int flags = ::fcntl(file.get(), F_GETFL);
  if (flags >= 0) ::fcntl(file.get(), F_SETFL, flags & ~O_NONBLOCK);
  return file;
}

}  // namespace cnlab::agent

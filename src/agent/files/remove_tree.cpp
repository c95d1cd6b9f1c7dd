#include "agent/files/remove_tree.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>

#include <fmt/format.h>

#include "agent/files/fs_util.h"
#include "agent/files/unique_fd.h"

namespace cnlab::agent {
namespace detail {
namespace {

struct Frame {
  std::string name;  // in the parent
  dev_t dev = 0;
  ino_t ino = 0;
  std::vector<std::string> pending;  // subdirectories still to remove
};

std::string below(const std::string& root, const std::vector<Frame>& stack, const std::string& name) {
  std::string path = root;
  for (size_t i = 1; i < stack.size(); ++i) path += "/" + stack[i].name;
  if (!name.empty()) path += "/" + name;
  return path;
}

bool is_mount_root(int parent, const std::string& name, dev_t root_dev, dev_t dev) {
  if (dev != root_dev) return true;
  // A bind mount of the same file system keeps the device number; the kernel (5.8+) says so.
  struct statx stx {};
  if (::statx(parent, name.c_str(), AT_SYMLINK_NOFOLLOW | AT_NO_AUTOMOUNT, STATX_BASIC_STATS, &stx) == 0 &&
      (stx.stx_attributes_mask & STATX_ATTR_MOUNT_ROOT) != 0) {
    return (stx.stx_attributes & STATX_ATTR_MOUNT_ROOT) != 0;
  }
  return false;
}

// unlinkat, making the directory writable for its owner when that is what stands in the way.
int unlink_in(int dir_fd, const std::string& name, int flags) {
  if (::unlinkat(dir_fd, name.c_str(), flags) == 0) return 0;
  if (errno != EACCES && errno != EPERM) return errno;
  if (::fchmod(dir_fd, 0700) != 0) return EACCES;
  return ::unlinkat(dir_fd, name.c_str(), flags) == 0 ? 0 : errno;
}

}  // namespace

Status remove_directory_contents(int dir_fd, const std::string& shown_path) {
  UniqueFd current(::dup(dir_fd));
  struct stat root_st {};
  if (!current.ok() || ::fstat(current.get(), &root_st) != 0) {
    return Error::internal(fmt::format("open {}: {}", shown_path, errno_text(errno)));
  }
  std::vector<Frame> stack;
  stack.push_back({"", root_st.st_dev, root_st.st_ino, {}});
  bool listed = false;
  std::vector<std::string> names;
  while (true) {
    Frame& top = stack.back();
    if (!listed) {
      if (!detail::list_directory(current.get(), &names)) {
        if (errno == EACCES && ::fchmod(current.get(), 0700) == 0 && detail::list_directory(current.get(), &names)) {
          // made readable
        } else {
          return Error::internal(fmt::format("list {}: {}", below(shown_path, stack, ""), errno_text(errno)));
        }
      }
      for (const std::string& name : names) {
        struct stat st {};
        if (::fstatat(current.get(), name.c_str(), &st, AT_SYMLINK_NOFOLLOW) != 0) {
          if (errno == ENOENT) continue;
          return Error::internal(fmt::format("stat {}: {}", below(shown_path, stack, name), errno_text(errno)));
        }
        if (S_ISDIR(st.st_mode)) {
          if (is_mount_root(current.get(), name, root_st.st_dev, st.st_dev)) {
            return Error::of(ErrorCode::kFailedPrecondition, "path", below(shown_path, stack, name),
                             "is a mount point; it is not removed (nor anything in it): unmount it first");
          }
          top.pending.push_back(name);
          continue;
        }
        if (int error = unlink_in(current.get(), name, 0); error != 0 && error != ENOENT) {
          return Error::internal(fmt::format("remove {}: {}", below(shown_path, stack, name), errno_text(error)));
        }
      }
      listed = true;
    }
    if (!top.pending.empty()) {
      std::string name = std::move(top.pending.back());
      top.pending.pop_back();
      UniqueFd child = detail::open_directory_at(current.get(), name.c_str());
      if (!child.ok() && errno == EACCES) {
        // Owned by the agent's user but without r or x: fchmodat's AT_SYMLINK_NOFOLLOW leaves a
        // link that replaced the directory meanwhile alone.
        if (::fchmodat(current.get(), name.c_str(), 0700, AT_SYMLINK_NOFOLLOW) == 0) {
          child = detail::open_directory_at(current.get(), name.c_str());
        }
      }
      if (!child.ok()) {
        if (errno == ENOENT) continue;
        if (errno == ELOOP || errno == ENOTDIR) {  // replaced by a link or a file meanwhile: not followed
          if (int error = unlink_in(current.get(), name, 0); error != 0 && error != ENOENT) {
            return Error::internal(fmt::format("remove {}: {}", below(shown_path, stack, name), errno_text(error)));
          }
          continue;
        }
        return Error::internal(fmt::format("open {}: {}", below(shown_path, stack, name), errno_text(errno)));
      }
      struct stat st {};
      if (::fstat(child.get(), &st) != 0) {
        return Error::internal(fmt::format("stat {}: {}", below(shown_path, stack, name), errno_text(errno)));
      }
      if (st.st_dev != root_st.st_dev) {
        return Error::of(ErrorCode::kFailedPrecondition, "path", below(shown_path, stack, name),
                         "is a mount point; it is not removed (nor anything in it): unmount it first");
      }
      stack.push_back({std::move(name), st.st_dev, st.st_ino, {}});
      current = std::move(child);
      listed = false;
      continue;
    }
    if (stack.size() == 1) return Status::ok();
    // Back up through "..": the real parent, whatever links say; checked to be the one we left.
    UniqueFd parent(::openat(current.get(), "..", O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
    struct stat parent_st {};
    const Frame& up = stack[stack.size() - 2];
    if (!parent.ok() || ::fstat(parent.get(), &parent_st) != 0 || parent_st.st_dev != up.dev ||
        parent_st.st_ino != up.ino) {
      return Error::of(ErrorCode::kConflict, "path", below(shown_path, stack, ""),
                       "was moved while it was being removed; nothing outside it was touched");
    }
    std::string name = std::move(top.name);
    stack.pop_back();
    current = std::move(parent);
    listed = true;  // the parent's entries were listed on the way down; its pending list goes on
    if (int error = unlink_in(current.get(), name, AT_REMOVEDIR); error != 0 && error != ENOENT) {
      if (error == ENOTEMPTY || error == EEXIST) {
        return Error::of(ErrorCode::kConflict, "path", below(shown_path, stack, name),
                         "is not empty after its contents were removed: something still writes into it");
      }
      return Error::internal(fmt::format("remove {}: {}", below(shown_path, stack, name), errno_text(error)));
    }
  }
}

}  // namespace detail

Status safe_remove_tree(const std::string& dir) {
  if (dir.empty()) return Error::invalid_argument("dir", dir, "required");
  struct stat st {};
  if (::lstat(dir.c_str(), &st) != 0) {
    if (errno == ENOENT) return Status::ok();
    return Error::internal(fmt::format("stat {}: {}", dir, errno_text(errno)));
  }
  if (!S_ISDIR(st.st_mode)) {
    if (::unlink(dir.c_str()) != 0 && errno != ENOENT) {
      return Error::internal(fmt::format("remove {}: {}", dir, errno_text(errno)));
    }
    return Status::ok();
  }
  UniqueFd fd = detail::open_directory_at(AT_FDCWD, dir.c_str());
  if (!fd.ok() && errno == EACCES && ::fchmodat(AT_FDCWD, dir.c_str(), 0700, AT_SYMLINK_NOFOLLOW) == 0) fd = detail::open_directory_at(AT_FDCWD, dir.c_str());
  if (!fd.ok()) {
    if (errno == ENOENT) return Status::ok();
    if (errno == ELOOP || errno == ENOTDIR) {  // became a link or a file after the lstat: remove only that
      return ::unlink(dir.c_str()) == 0 || errno == ENOENT
                 ? Status::ok()
                 : Status(Error::internal(fmt::format("remove {}: {}", dir, errno_text(errno))));
    }
    return Error::internal(fmt::format("open {}: {}", dir, errno_text(errno)));
  }
  if (auto s = detail::remove_directory_contents(fd.get(), dir); !s) return s;
  fd.reset();
  if (::rmdir(dir.c_str()) != 0 && errno != ENOENT) {
    return Error::internal(fmt::format("remove {}: {}", dir, errno_text(errno)));
  }
  return Status::ok();
}

}  // namespace cnlab::agent

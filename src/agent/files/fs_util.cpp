#include "agent/files/fs_util.h"

#include <dirent.h>
#include <fcntl.h>

#include <algorithm>
#include <cerrno>

namespace cnlab::agent::detail {

UniqueFd open_directory_at(int parent, const char* name) {
  return UniqueFd(::openat(parent, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC));
}

bool list_directory(int dir_fd, std::vector<std::string>* names) {
  names->clear();
  // fdopendir takes the descriptor it is given; a duplicate keeps the caller's open.
  int copy = ::dup(dir_fd);
  if (copy < 0) return false;
  DIR* dir = ::fdopendir(copy);
  if (dir == nullptr) {
    int error = errno;
    ::close(copy);
    errno = error;
    return false;
  }
  ::rewinddir(dir);
  while (true) {
    errno = 0;
    dirent* entry = ::readdir(dir);
    if (entry == nullptr) break;
    std::string_view name = entry->d_name;
    if (name == "." || name == "..") continue;
    names->emplace_back(name);
  }
  int error = errno;
  ::closedir(dir);
  if (error != 0) {
    errno = error;
    return false;
  }
  std::sort(names->begin(), names->end());
  return true;
}

std::string kind_of(mode_t mode) {
  switch (mode & S_IFMT) {
    case S_IFREG: return "a regular file";
    case S_IFDIR: return "a directory";
    case S_IFLNK: return "a symbolic link";
    case S_IFIFO: return "a named pipe (fifo)";
    case S_IFSOCK: return "a socket";
    case S_IFCHR: return "a character device";
    case S_IFBLK: return "a block device";
    default: return "a file of unknown type";
  }
}

}  // namespace cnlab::agent::detail

#include "server/data_dir.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

namespace cnlab::server {

Result<std::string> read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return Error::not_found("file", path, std::string("cannot read: ") + std::strerror(errno));
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

Status write_file(const std::string& path, const std::string& content, unsigned mode) {
  std::string tmp = path + ".tmp";
  int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, mode);
  if (fd < 0) return Error::invalid_argument("file", path, std::string("cannot write: ") + std::strerror(errno));
  size_t done = 0;
  while (done < content.size()) {
    ssize_t n = ::write(fd, content.data() + done, content.size() - done);
    if (n < 0) {
      if (errno == EINTR) continue;
      ::close(fd);
      return Error::internal("write " + tmp + ": " + std::strerror(errno));
    }
    done += static_cast<size_t>(n);
  }
  ::fchmod(fd, mode);
  bool synced = ::fsync(fd) == 0;
  ::close(fd);
  if (!synced || ::rename(tmp.c_str(), path.c_str()) != 0) {
    return Error::internal("write " + path + ": " + std::strerror(errno));
  }
  return Status::ok();
}

}  // namespace cnlab::server

#include "agent/files/unique_fd.h"

#include <cstring>

namespace cnlab::agent {

std::string errno_text(int errno_value) {
  // strerror_r (GNU form) is thread-safe where strerror is not; the agent unpacks on many threads.
  char buffer[256];
  return ::strerror_r(errno_value, buffer, sizeof buffer);
}

}  // namespace cnlab::agent

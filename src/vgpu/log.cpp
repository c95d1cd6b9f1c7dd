#include "vgpu/log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cstdarg>
#include <cstdio>

namespace cnlab::vgpu {
namespace {
LogLevel g_level = LogLevel::kError;
int g_fd = STDERR_FILENO;
}  // namespace

void log_init(const Config& config) {
  g_level = config.log_level;
  if (config.log_file[0]) {
    int fd = ::open(config.log_file, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) g_fd = fd;
  }
}

void log_line(LogLevel level, const char* format, ...) {
  if (level > g_level) return;
  static const char* const kNames[] = {"error", "info", "debug"};
  char line[1024];
  int n = std::snprintf(line, sizeof line, "cnlab-vgpu[%d] %s: ", static_cast<int>(::getpid()),
                        kNames[static_cast<int>(level)]);
  va_list args;
  va_start(args, format);
  int m = std::vsnprintf(line + n, sizeof line - n - 1, format, args);
  va_end(args);
  size_t len = static_cast<size_t>(n) + (m < 0 ? 0 : static_cast<size_t>(m));
  if (len > sizeof line - 2) len = sizeof line - 2;
  line[len++] = '\n';
  (void)!::write(g_fd, line, len);
}

}  // namespace cnlab::vgpu

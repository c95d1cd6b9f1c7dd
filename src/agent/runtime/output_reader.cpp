// OutputReader: reads the shim's output file from a persisted cursor.
#include <fcntl.h>
#include <poll.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <thread>

#include <fmt/format.h>

#include "agent/runtime/output_format.h"
#include "agent/runtime/runtime.h"

namespace cnlab::agent {
namespace {

constexpr size_t kReadChunk = 256 * 1024;
// A record is at most 64 KiB of input, which U+FFFD replacement can triple; anything much longer
// without a newline is not a file the shim wrote.
constexpr size_t kMaxRecordBytes = 1024 * 1024;

std::string errno_text(int err) { return std::strerror(err); }

}  // namespace

std::string_view to_string(OutputStream stream) { return stream == OutputStream::kStdout ? "stdout" : "stderr"; }

Result<OutputReader> OutputReader::open(const std::filesystem::path& path, OutputCursor from) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    return Error::of(err == ENOENT ? ErrorCode::kNotFound : ErrorCode::kUnavailable, "output file", path.string(),
                     "cannot open: " + errno_text(err));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    return Error::invalid_argument("output file", path.string(), "not a regular file");
  }
  if (from.offset > static_cast<uint64_t>(st.st_size)) {
    ::close(fd);
    return Error::invalid_argument(
        "cursor.offset", std::to_string(from.offset),
        fmt::format("beyond the end of {} ({} bytes): the cursor belongs to another file", path.string(), st.st_size));
  }
  if (from.offset > 0) {
    char before = 0;
    if (pread(fd, &before, 1, static_cast<off_t>(from.offset - 1)) != 1 || before != '\n') {
      ::close(fd);
      return Error::invalid_argument(
          "cursor.offset", std::to_string(from.offset),
          "not at a record boundary of " + path.string() + " (the byte before it is not a newline)");
    }
  }
  if (from.offset == 0 && from.seq != 0) {
    ::close(fd);
    return Error::invalid_argument("cursor.seq", std::to_string(from.seq), "must be 0 when cursor.offset is 0");
  }
  // inotify is a convenience: a node can run out of instances (fs.inotify.max_user_instances),
  // and then wait() polls instead.
  int inotify_fd = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  if (inotify_fd >= 0 && inotify_add_watch(inotify_fd, path.c_str(), IN_MODIFY | IN_CLOSE_WRITE) < 0) {
    ::close(inotify_fd);
    inotify_fd = -1;
  }
  return OutputReader(fd, inotify_fd, from);
}

OutputReader::OutputReader(int fd, int inotify_fd, OutputCursor from)
    : fd_(fd), inotify_fd_(inotify_fd), cursor_(from), read_offset_(from.offset) {}

OutputReader::OutputReader(OutputReader&& other) noexcept
    : fd_(other.fd_),
      inotify_fd_(other.inotify_fd_),
      cursor_(other.cursor_),
      read_offset_(other.read_offset_),
      buffer_(std::move(other.buffer_)),
      pos_(other.pos_),
      malformed_(other.malformed_) {
  other.fd_ = -1;
  other.inotify_fd_ = -1;
}

OutputReader& OutputReader::operator=(OutputReader&& other) noexcept {
  if (this != &other) {
    close_fds();
    fd_ = other.fd_;
    inotify_fd_ = other.inotify_fd_;
    cursor_ = other.cursor_;
    read_offset_ = other.read_offset_;
    buffer_ = std::move(other.buffer_);
    pos_ = other.pos_;
    malformed_ = other.malformed_;
    other.fd_ = -1;
    other.inotify_fd_ = -1;
  }
  return *this;
}

OutputReader::~OutputReader() { close_fds(); }

void OutputReader::close_fds() {
  if (fd_ >= 0) ::close(fd_);
  if (inotify_fd_ >= 0) ::close(inotify_fd_);
  fd_ = -1;
  inotify_fd_ = -1;
}

Result<std::vector<OutputLine>> OutputReader::read(size_t max_lines) {
  std::vector<OutputLine> lines;
  if (fd_ < 0) return Error::failed_precondition("output reader: read after move");
  bool at_end = false;
  while (lines.size() < max_lines) {
    const char* start = buffer_.data() + pos_;
    const size_t available = buffer_.size() - pos_;
    const void* newline = available ? std::memchr(start, '\n', available) : nullptr;
    if (newline == nullptr) {
      if (at_end) break;
      if (available > kMaxRecordBytes) {
        return Error::of(
            ErrorCode::kInternal, "output file offset", std::to_string(cursor_.offset),
            fmt::format("a record longer than {} bytes: not an output file the shim wrote", kMaxRecordBytes));
      }
      buffer_.erase(0, pos_);
      pos_ = 0;
      const size_t old_size = buffer_.size();
      buffer_.resize(old_size + kReadChunk);
      const ssize_t n = pread(fd_, buffer_.data() + old_size, kReadChunk, static_cast<off_t>(read_offset_));
      if (n < 0) {
        const int err = errno;
        buffer_.resize(old_size);
        if (err == EINTR) continue;
        return Error::of(ErrorCode::kUnavailable, "output file", "", "read failed: " + errno_text(err));
      }
      buffer_.resize(old_size + static_cast<size_t>(n));
      read_offset_ += static_cast<uint64_t>(n);
      // One short read means we are at the end for now; what is left is a record being written.
      if (static_cast<size_t>(n) < kReadChunk) at_end = true;
      continue;
    }
    const size_t length = static_cast<size_t>(static_cast<const char*>(newline) - start);
    const std::string_view record_text(start, length);
    cursor_.seq += 1;
    cursor_.offset += length + 1;
    pos_ += length + 1;
    const auto parsed = output::parse_record(record_text);
    if (!parsed) {
      ++malformed_;
      continue;
    }
    OutputLine line;
    line.seq = cursor_.seq;
    line.stream = parsed->stream;
    line.partial = parsed->partial;
    line.time = parsed->time;
    line.text.assign(parsed->text);
    line.cursor = cursor_;
    lines.push_back(std::move(line));
  }
  return lines;
}

bool OutputReader::wait(std::chrono::milliseconds timeout) {
  if (fd_ < 0) return false;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (true) {
    // A whole record already read but not yet returned (read() stopped at max_lines).
    if (std::memchr(buffer_.data() + pos_, '\n', buffer_.size() - pos_) != nullptr) return true;
    struct stat st {};
    if (fstat(fd_, &st) == 0 && static_cast<uint64_t>(st.st_size) > read_offset_) return true;
    const auto now = std::chrono::steady_clock::now();
    if (now >= deadline) return false;
    const auto left = std::chrono::ceil<std::chrono::milliseconds>(deadline - now);
    if (inotify_fd_ >= 0) {
      // Capped so that a missed event (a file rewritten by rename) costs at most 100 ms.
      pollfd pfd{inotify_fd_, POLLIN, 0};
      const int ms = static_cast<int>(std::min<int64_t>(left.count(), 100));
      if (poll(&pfd, 1, ms) > 0) {
        char events[4096];
        while (::read(inotify_fd_, events, sizeof events) > 0) {
        }
      }
    } else {
      std::this_thread::sleep_for(std::min<std::chrono::milliseconds>(left, std::chrono::milliseconds(10)));
    }
  }
}

}  // namespace cnlab::agent

// The output file's record format (described in runtime.h), shared by the shim that writes it and
// OutputReader. Private to src/agent/runtime.
#pragma once

#include <time.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "agent/runtime/runtime.h"

namespace cnlab::agent::output {

constexpr size_t kTimestampSize = 24;                   // 2026-12-01T03:26:01.123Z
constexpr size_t kHeaderSize = 2 + kTimestampSize + 1;  // "O " <time> " "
constexpr size_t kMaxLineBytes = 64 * 1024;             // longer lines are split into partial records

// Formats timestamps, redoing the calendar work only when the second changes: the shim stamps
// every read with it, at up to hundreds of thousands of lines a second.
class TimestampFormatter {
 public:
  // Returns kTimestampSize characters (not NUL-terminated), valid until the next call.
  const char* format(const timespec& time);

 private:
  int64_t cached_second_ = INT64_MIN;
  char text_[kTimestampSize + 1] = {};
};

std::optional<std::chrono::system_clock::time_point> parse_timestamp(std::string_view text);
// The same form for exit.json: "2026-12-01T03:26:01.123Z".
std::string format_time(std::chrono::system_clock::time_point time);

// Appends `bytes` with every byte that is not part of a valid UTF-8 sequence replaced by U+FFFD.
void append_utf8_sanitized(std::string& out, std::string_view bytes);
// The length of the longest prefix of `bytes` that does not end inside a UTF-8 sequence that more
// bytes could still complete (so a split there does not cut a character in two).
size_t complete_utf8_prefix(std::string_view bytes);

void append_record(std::string& out, OutputStream stream, bool partial, const char* timestamp, std::string_view text);

// Cuts one stream's bytes into records.
class LineSplitter {
 public:
  explicit LineSplitter(OutputStream stream) : stream_(stream) {}

  // Appends a record for each line `data` completes, and 64 KiB partial records of a line that
  // grows past that; keeps the unfinished rest.
  void feed(std::string_view data, const char* timestamp, std::string& out);
  // Writes what is held as a partial record: the line will continue in a later record.
  void flush_partial(const char* timestamp, std::string& out);
  // The stream ended: writes what is held as a whole line.
  void finish(const char* timestamp, std::string& out);
  bool has_pending() const { return !pending_.empty(); }

 private:
  void emit_long(std::string_view text, bool ends_line, const char* timestamp, std::string& out);

  OutputStream stream_;
  std::string pending_;
};

struct ParsedRecord {
  OutputStream stream = OutputStream::kStdout;
  bool partial = false;
  std::chrono::system_clock::time_point time;
  std::string_view text;
};
// `line` is one record without its '\n'.
std::optional<ParsedRecord> parse_record(std::string_view line);

}  // namespace cnlab::agent::output

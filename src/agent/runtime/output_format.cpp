#include "agent/runtime/output_format.h"

#include <cstring>

namespace cnlab::agent::output {
namespace {

void put2(char* at, int value) {
  at[0] = static_cast<char>('0' + value / 10 % 10);
  at[1] = static_cast<char>('0' + value % 10);
}

bool digits(std::string_view text, size_t at, size_t count, int& value) {
  value = 0;
  for (size_t i = at; i < at + count; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    value = value * 10 + (text[i] - '0');
  }
  return true;
}

bool continuation(unsigned char c) { return (c & 0xC0) == 0x80; }

// Length of the valid UTF-8 sequence starting at s[i] (a non-ASCII byte), or 0 when it is not one
// (RFC 3629: no overlong forms, no surrogates, nothing above U+10FFFF).
size_t sequence_length(std::string_view s, size_t i) {
  const auto c = static_cast<unsigned char>(s[i]);
  const size_t left = s.size() - i;
  auto at = [&](size_t k) { return static_cast<unsigned char>(s[i + k]); };
  if (c >= 0xC2 && c <= 0xDF) return left >= 2 && continuation(at(1)) ? 2 : 0;
  if (c >= 0xE0 && c <= 0xEF) {
    if (left < 3) return 0;
    const unsigned char lo = c == 0xE0 ? 0xA0 : 0x80;
    const unsigned char hi = c == 0xED ? 0x9F : 0xBF;
    return at(1) >= lo && at(1) <= hi && continuation(at(2)) ? 3 : 0;
  }
  if (c >= 0xF0 && c <= 0xF4) {
    if (left < 4) return 0;
    const unsigned char lo = c == 0xF0 ? 0x90 : 0x80;
    const unsigned char hi = c == 0xF4 ? 0x8F : 0xBF;
    return at(1) >= lo && at(1) <= hi && continuation(at(2)) && continuation(at(3)) ? 4 : 0;
  }
  return 0;
}

size_t expected_length(unsigned char lead) {
  if (lead >= 0xC2 && lead <= 0xDF) return 2;
  if (lead >= 0xE0 && lead <= 0xEF) return 3;
  if (lead >= 0xF0 && lead <= 0xF4) return 4;
  return 0;
}

}  // namespace

const char* TimestampFormatter::format(const timespec& time) {
  if (time.tv_sec != cached_second_) {
    cached_second_ = time.tv_sec;
    const time_t seconds = time.tv_sec;
    struct tm parts {};
    gmtime_r(&seconds, &parts);
    const int year = parts.tm_year + 1900;
    text_[0] = static_cast<char>('0' + year / 1000 % 10);
    text_[1] = static_cast<char>('0' + year / 100 % 10);
    put2(text_ + 2, year % 100);
    text_[4] = '-';
    put2(text_ + 5, parts.tm_mon + 1);
    text_[7] = '-';
    put2(text_ + 8, parts.tm_mday);
    text_[10] = 'T';
    put2(text_ + 11, parts.tm_hour);
    text_[13] = ':';
    put2(text_ + 14, parts.tm_min);
    text_[16] = ':';
    put2(text_ + 17, parts.tm_sec);
    text_[19] = '.';
    text_[23] = 'Z';
  }
  const int millis = static_cast<int>(time.tv_nsec / 1000000);
  text_[20] = static_cast<char>('0' + millis / 100);
  put2(text_ + 21, millis % 100);
  return text_;
}

std::optional<std::chrono::system_clock::time_point> parse_timestamp(std::string_view text) {
  if (text.size() != kTimestampSize || text[4] != '-' || text[7] != '-' || text[10] != 'T' || text[13] != ':' ||
      text[16] != ':' || text[19] != '.' || text[23] != 'Z') {
    return std::nullopt;
  }
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0, millis = 0;
  if (!digits(text, 0, 4, year) || !digits(text, 5, 2, month) || !digits(text, 8, 2, day) ||
      !digits(text, 11, 2, hour) || !digits(text, 14, 2, minute) || !digits(text, 17, 2, second) ||
      !digits(text, 20, 3, millis)) {
    return std::nullopt;
  }
  const std::chrono::year_month_day date{std::chrono::year{year}, std::chrono::month{static_cast<unsigned>(month)},
                                         std::chrono::day{static_cast<unsigned>(day)}};
  if (!date.ok() || hour > 23 || minute > 59 || second > 60) return std::nullopt;
  return std::chrono::sys_days{date} + std::chrono::hours{hour} + std::chrono::minutes{minute} +
         std::chrono::seconds{second} + std::chrono::milliseconds{millis};
}

std::string format_time(std::chrono::system_clock::time_point time) {
  const auto since_epoch = time.time_since_epoch();
  const auto seconds = std::chrono::floor<std::chrono::seconds>(since_epoch);
  timespec ts{};
  ts.tv_sec = static_cast<time_t>(seconds.count());
  ts.tv_nsec = static_cast<long>(std::chrono::duration_cast<std::chrono::nanoseconds>(since_epoch - seconds).count());
  TimestampFormatter formatter;
  return std::string(formatter.format(ts), kTimestampSize);
}

void append_utf8_sanitized(std::string& out, std::string_view s) {
  static constexpr std::string_view kReplacement = "\xEF\xBF\xBD";
  size_t i = 0;
  size_t clean_from = 0;
  const size_t n = s.size();
  while (i < n) {
    // Most output is ASCII: check eight bytes at a time.
    while (i + 8 <= n) {
      uint64_t word;
      std::memcpy(&word, s.data() + i, 8);
      if (word & 0x8080808080808080ULL) break;
      i += 8;
    }
    if (i >= n) break;
    if (static_cast<unsigned char>(s[i]) < 0x80) {
      ++i;
      continue;
    }
    if (const size_t length = sequence_length(s, i)) {
      i += length;
      continue;
    }
    out.append(s.data() + clean_from, i - clean_from);
    out.append(kReplacement);
    ++i;
    clean_from = i;
  }
  out.append(s.data() + clean_from, n - clean_from);
}

size_t complete_utf8_prefix(std::string_view bytes) {
  const size_t n = bytes.size();
  // Walk back over at most three continuation bytes to the last sequence's lead byte.
  size_t i = n;
  for (size_t back = 0; back < 4 && i > 0; ++back) {
    --i;
    const auto c = static_cast<unsigned char>(bytes[i]);
    if (!continuation(c)) {
      const size_t want = expected_length(c);
      return want > n - i ? i : n;
    }
  }
  return n;
}

void append_record(std::string& out, OutputStream stream, bool partial, const char* timestamp, std::string_view text) {
  char letter = stream == OutputStream::kStdout ? 'O' : 'E';
  if (partial) letter = static_cast<char>(letter - 'A' + 'a');
  out.push_back(letter);
  out.push_back(' ');
  out.append(timestamp, kTimestampSize);
  out.push_back(' ');
  append_utf8_sanitized(out, text);
  out.push_back('\n');
}

void LineSplitter::emit_long(std::string_view text, bool ends_line, const char* timestamp, std::string& out) {
  while (text.size() > kMaxLineBytes) {
    size_t cut = complete_utf8_prefix(text.substr(0, kMaxLineBytes));
    if (cut == 0) cut = kMaxLineBytes;
    append_record(out, stream_, /*partial=*/true, timestamp, text.substr(0, cut));
    text.remove_prefix(cut);
  }
  if (ends_line)
    append_record(out, stream_, /*partial=*/false, timestamp, text);
  else
    pending_.assign(text);
}

void LineSplitter::feed(std::string_view data, const char* timestamp, std::string& out) {
  while (!data.empty()) {
    const void* newline = std::memchr(data.data(), '\n', data.size());
    if (newline == nullptr) {
      pending_.append(data);
      if (pending_.size() > kMaxLineBytes) {
        const std::string whole = std::move(pending_);
        pending_.clear();
        emit_long(whole, /*ends_line=*/false, timestamp, out);
      }
      return;
    }
    const size_t length = static_cast<size_t>(static_cast<const char*>(newline) - data.data());
    const std::string_view line = data.substr(0, length);
    if (pending_.empty() && line.size() <= kMaxLineBytes) {
      append_record(out, stream_, /*partial=*/false, timestamp, line);
    } else {
      pending_.append(line);
      const std::string whole = std::move(pending_);
      pending_.clear();
      emit_long(whole, /*ends_line=*/true, timestamp, out);
    }
    data.remove_prefix(length + 1);
  }
}

void LineSplitter::flush_partial(const char* timestamp, std::string& out) {
  if (pending_.empty()) return;
  // Keep a character cut in two by the pipe for the next record.
  const size_t cut = complete_utf8_prefix(pending_);
  if (cut == 0) return;
  append_record(out, stream_, /*partial=*/true, timestamp, std::string_view(pending_).substr(0, cut));
  pending_.erase(0, cut);
}

void LineSplitter::finish(const char* timestamp, std::string& out) {
  if (pending_.empty()) return;
  append_record(out, stream_, /*partial=*/false, timestamp, pending_);
  pending_.clear();
}

std::optional<ParsedRecord> parse_record(std::string_view line) {
  if (line.size() < kHeaderSize || line[1] != ' ' || line[kHeaderSize - 1] != ' ') return std::nullopt;
  ParsedRecord record;
  switch (line[0]) {
    case 'O': record.stream = OutputStream::kStdout; break;
    case 'o':
      record.stream = OutputStream::kStdout;
      record.partial = true;
      break;
    case 'E': record.stream = OutputStream::kStderr; break;
    case 'e':
      record.stream = OutputStream::kStderr;
      record.partial = true;
      break;
    default: return std::nullopt;
  }
  const auto time = parse_timestamp(line.substr(2, kTimestampSize));
  if (!time) return std::nullopt;
  record.time = *time;
  record.text = line.substr(kHeaderSize);
  return record;
}

}  // namespace cnlab::agent::output

#include "common/time.h"

#include <fmt/format.h>

#include <cctype>

#include "common/strings.h"

namespace cnlab {
namespace {

struct Civil {
  int year;
  unsigned month, day;
  int64_t hour, minute, second;
};

Civil to_civil(Time time) {
  auto days = std::chrono::floor<std::chrono::days>(time);
  std::chrono::year_month_day ymd{days};
  int64_t rest = (time - days).count();
  return {static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()), static_cast<unsigned>(ymd.day()),
          rest / 3600, rest / 60 % 60, rest % 60};
}

bool digits(std::string_view text, size_t pos, size_t count) {
  if (pos + count > text.size()) return false;
  for (size_t i = pos; i < pos + count; ++i) {
    if (!std::isdigit(static_cast<unsigned char>(text[i]))) return false;
  }
  return true;
}

int number(std::string_view text, size_t pos, size_t count) {
  int value = 0;
  for (size_t i = pos; i < pos + count; ++i) value = value * 10 + (text[i] - '0');
  return value;
}

}  // namespace

std::string format_rfc3339(Time time) {
  Civil c = to_civil(time);
  return fmt::format("{:04}-{:02}-{:02}T{:02}:{:02}:{:02}Z", c.year, c.month, c.day, c.hour, c.minute, c.second);
}

Result<Time> parse_rfc3339(std::string_view text, std::string_view field) {
  auto bad = [&] {
    return Error::invalid_argument(std::string(field), std::string(text),
                                   "expected an RFC 3339 time such as 2026-11-30T14:05:00Z");
  };
  // YYYY-MM-DDTHH:MM:SS then optional .fraction then Z or +HH:MM / -HH:MM
  if (!digits(text, 0, 4) || text.size() < 20 || text[4] != '-' || !digits(text, 5, 2) || text[7] != '-' ||
      !digits(text, 8, 2) || (text[10] != 'T' && text[10] != 't' && text[10] != ' ') || !digits(text, 11, 2) ||
      text[13] != ':' || !digits(text, 14, 2) || text[16] != ':' || !digits(text, 17, 2)) {
    return bad();
  }
  std::chrono::year_month_day ymd{std::chrono::year{number(text, 0, 4)},
                                  std::chrono::month{static_cast<unsigned>(number(text, 5, 2))},
                                  std::chrono::day{static_cast<unsigned>(number(text, 8, 2))}};
  int hour = number(text, 11, 2), minute = number(text, 14, 2), second = number(text, 17, 2);
  if (!ymd.ok() || hour > 23 || minute > 59 || second > 60) return bad();
  size_t pos = 19;
  if (pos < text.size() && text[pos] == '.') {
    ++pos;
    if (!digits(text, pos, 1)) return bad();
    while (digits(text, pos, 1)) ++pos;
  }
  int64_t offset = 0;
  if (pos < text.size() && (text[pos] == 'Z' || text[pos] == 'z')) {
    ++pos;
  } else if (pos < text.size() && (text[pos] == '+' || text[pos] == '-') && digits(text, pos + 1, 2) &&
             pos + 3 < text.size() && text[pos + 3] == ':' && digits(text, pos + 4, 2)) {
    offset = (number(text, pos + 1, 2) * 3600 + number(text, pos + 4, 2) * 60) * (text[pos] == '+' ? 1 : -1);
    pos += 6;
  } else {
    return bad();
  }
  if (pos != text.size()) return bad();
  Time day_start{std::chrono::sys_days{ymd}};
  return day_start + Duration{hour * 3600 + minute * 60 + second - offset};
}

std::string format_duration(Duration duration) {
  int64_t total = duration.count();
  if (total == 0) return "0s";
  std::string out = total < 0 ? "-" : "";
  if (total < 0) total = -total;
  const std::pair<int64_t, char> units[] = {{86400, 'd'}, {3600, 'h'}, {60, 'm'}, {1, 's'}};
  for (auto [size, suffix] : units) {
    if (total >= size) {
      out += fmt::format("{}{}", total / size, suffix);
      total %= size;
    }
  }
  return out;
}

Result<Duration> parse_duration(std::string_view text, std::string_view field) {
  auto bad = [&] {
    return Error::invalid_argument(std::string(field), std::string(text),
                                   "expected a duration such as 90s, 15m, 2h, 1h30m or 7d");
  };
  if (text.empty()) return bad();
  int64_t total = 0;
  size_t pos = 0;
  while (pos < text.size()) {
    size_t start = pos;
    while (pos < text.size() && std::isdigit(static_cast<unsigned char>(text[pos]))) ++pos;
    if (pos == start || pos == text.size() || pos - start > 12) return bad();
    auto amount = parse_int(text.substr(start, pos - start), field);
    if (!amount) return bad();
    switch (text[pos]) {
      case 'd': total += *amount * 86400; break;
      case 'h': total += *amount * 3600; break;
      case 'm': total += *amount * 60; break;
      case 's': total += *amount; break;
      default: return bad();
    }
    ++pos;
  }
  return Duration{total};
}

std::string format_time_near(Time time, Time now) {
  Civil c = to_civil(time);
  Duration apart = time > now ? time - now : now - time;
  if (apart < kDay) return fmt::format("{:02}:{:02}", c.hour, c.minute);
  return fmt::format("{:04}-{:02}-{:02} {:02}:{:02}", c.year, c.month, c.day, c.hour, c.minute);
}

}  // namespace cnlab

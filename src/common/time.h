// Time as the scheduler and the API see it: whole seconds since the Unix epoch, UTC.
// No function here reads a clock; "now" is always passed in.
#pragma once

#include <chrono>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab {

using Duration = std::chrono::seconds;
using Time = std::chrono::sys_seconds;

constexpr Duration kMinute{60};
constexpr Duration kHour{3600};
constexpr Duration kDay{86400};

// "2026-11-30T14:05:00Z"; parse also takes offsets such as "+02:00".
std::string format_rfc3339(Time time);
Result<Time> parse_rfc3339(std::string_view text, std::string_view field);

// "1h30m", "45s", "7d"; the printer writes the shortest such form (0 -> "0s").
std::string format_duration(Duration duration);
Result<Duration> parse_duration(std::string_view text, std::string_view field);

// For people: "14:05" when `time` is within a day of `now`, else "2026-12-03 14:05".
std::string format_time_near(Time time, Time now);

}  // namespace cnlab

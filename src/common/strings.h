// Small string helpers shared by parsers and printers.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "common/result.h"

namespace cnlab {

std::string to_lower(std::string_view text);
std::string_view trim(std::string_view text);
std::vector<std::string_view> split(std::string_view text, char separator);
std::string join(const std::vector<std::string>& parts, std::string_view separator);

// Parses a whole base-10 integer (optional leading '-'); `field` names the input in the error.
Result<int64_t> parse_int(std::string_view text, std::string_view field);
// Parses a whole decimal number such as "0.5" or "12".
Result<double> parse_double(std::string_view text, std::string_view field);

// "HOST:PORT" (an IPv6 address in brackets: "[::1]:80"): HOST of letters, digits, '.' and '-' (or
// an IPv6 address), PORT 1..65535. The error names `field`, the text and the form.
struct HostPort {
  std::string host;  // without brackets
  int port = 0;
};
Result<HostPort> parse_host_port(std::string_view text, std::string_view field);
// The other way: "host:port", "[v6 address]:port".
std::string format_host_port(const HostPort& where);

}  // namespace cnlab

#include "common/strings.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdlib>

namespace cnlab {

std::string to_lower(std::string_view text) {
  std::string out(text);
  for (char& c : out) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return out;
}

std::string_view trim(std::string_view text) {
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.front()))) text.remove_prefix(1);
  while (!text.empty() && std::isspace(static_cast<unsigned char>(text.back()))) text.remove_suffix(1);
  return text;
}

std::vector<std::string_view> split(std::string_view text, char separator) {
  std::vector<std::string_view> parts;
  size_t start = 0;
  while (true) {
    size_t end = text.find(separator, start);
    if (end == std::string_view::npos) {
      parts.push_back(text.substr(start));
      return parts;
    }
    parts.push_back(text.substr(start, end - start));
    start = end + 1;
  }
}

std::string join(const std::vector<std::string>& parts, std::string_view separator) {
  std::string out;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (i > 0) out += separator;
    out += parts[i];
  }
  return out;
}

Result<int64_t> parse_int(std::string_view text, std::string_view field) {
  int64_t value = 0;
  auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (text.empty() || ec != std::errc() || end != text.data() + text.size()) {
    return Error::invalid_argument(std::string(field), std::string(text), "expected a whole number");
  }
  return value;
}

Result<double> parse_double(std::string_view text, std::string_view field) {
  std::string copy(text);
  char* end = nullptr;
  double value = copy.empty() ? 0.0 : std::strtod(copy.c_str(), &end);
  if (copy.empty() || end != copy.c_str() + copy.size() || !std::isfinite(value)) {
    return Error::invalid_argument(std::string(field), copy, "expected a number");
  }
  return value;
}

std::string format_host_port(const HostPort& where) {
  const bool v6 = where.host.find(':') != std::string::npos;
  return (v6 ? "[" + where.host + "]" : where.host) + ":" + std::to_string(where.port);
}

Result<HostPort> parse_host_port(std::string_view text, std::string_view field) {
  auto bad = [&] {
    return Error::invalid_argument(std::string(field), std::string(text.substr(0, 128)),
                                   "expected HOST:PORT (an IPv6 address in brackets), port 1..65535");
  };
  const size_t colon = text.rfind(':');
  if (colon == std::string_view::npos || colon == 0 || text.size() > 262) return bad();
  std::string_view host = text.substr(0, colon);
  const bool bracketed = host.front() == '[';
  if (bracketed) {
    if (host.size() < 3 || host.back() != ']') return bad();
    host = host.substr(1, host.size() - 2);
  }
  for (char c : host) {
    const bool v6 = bracketed && (c == ':' || c == '%');
    if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && !v6) return bad();
  }
  auto port = parse_int(text.substr(colon + 1), field);
  if (!port || *port < 1 || *port > 65535) return bad();
  return HostPort{std::string(host), static_cast<int>(*port)};
}

}  // namespace cnlab

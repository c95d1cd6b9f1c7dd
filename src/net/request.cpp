// Request helpers and request-target decoding.
#include <utility>

#include "net/http_util.h"

#include <nlohmann/json.hpp>

namespace cnlab::net {

std::string Request::header(const std::string& lower_name) const {
  auto it = headers.find(lower_name);
  return it == headers.end() ? std::string() : it->second;
}

std::string Request::query_value(const std::string& name) const {
  auto it = query.find(name);
  return it == query.end() ? std::string() : it->second;
}

bool Request::has_query(const std::string& name) const { return query.find(name) != query.end(); }

namespace detail {
namespace {

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

void percent_decode(std::string_view text, bool plus_as_space, std::string& out) {
  out.clear();
  out.reserve(text.size());
  for (size_t i = 0; i < text.size(); ++i) {
    char c = text[i];
    if (c == '%' && i + 2 < text.size()) {
      int hi = hex_value(text[i + 1]);
      int lo = hex_value(text[i + 2]);
      if (hi >= 0 && lo >= 0) {
        out.push_back(static_cast<char>(hi * 16 + lo));
        i += 2;
        continue;
      }
    }
    out.push_back(plus_as_space && c == '+' ? ' ' : c);
  }
}

std::string percent_decode(std::string_view text, bool plus_as_space) {
  std::string out;
  percent_decode(text, plus_as_space, out);
  return out;
}

void decode_target(Request& request) {
  std::string_view target = request.target;
  // Absolute form ("http://host:port/path?query"): drop the scheme and the authority.
  if (!target.empty() && target.front() != '/') {
    auto scheme_end = target.find("://");
    if (scheme_end != std::string_view::npos) {
      auto path_start = target.find_first_of("/?", scheme_end + 3);
      target = path_start == std::string_view::npos ? std::string_view("/") : target.substr(path_start);
    }
  }
  auto fragment = target.find('#');
  if (fragment != std::string_view::npos) target = target.substr(0, fragment);
  auto question = target.find('?');
  std::string_view path = target.substr(0, question);
  percent_decode(path.empty() ? std::string_view("/") : path, /*plus_as_space=*/false, request.path);
  request.query.clear();
  if (question == std::string_view::npos) return;
  std::string_view query = target.substr(question + 1);
  while (!query.empty()) {
    auto amp = query.find('&');
    std::string_view pair = query.substr(0, amp);
    query = amp == std::string_view::npos ? std::string_view() : query.substr(amp + 1);
    if (pair.empty()) continue;
    auto eq = pair.find('=');
    std::string_view key = pair.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? std::string_view() : pair.substr(eq + 1);
    request.query.emplace(percent_decode(key, true), percent_decode(value, true));
  }
}

std::string error_body(std::string_view code, std::string_view message) {
  nlohmann::json body = {{"error", {{"code", code}, {"message", message}}}};
  return body.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

bool valid_header_name(std::string_view name) {
  if (name.empty()) return false;
  for (char c : name) {
    if (c == '\r' || c == '\n' || c == '\0' || c == ':' || c == ' ' || c == '\t') return false;
  }
  return true;
}

bool valid_header_value(std::string_view value) {
  for (char c : value) {
    if (c == '\r' || c == '\n' || c == '\0') return false;
  }
  return true;
}

}  // namespace detail
}  // namespace cnlab::net

#include "server/router.h"

namespace cnlab::server {
namespace {

// The non-empty segments of `path` with where each ends (the offset just past it).
struct Segments {
  std::vector<std::string> text;
  std::vector<size_t> end;
};

Segments segments_of(const std::string& path) {
  Segments out;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) {
      out.text.push_back(path.substr(start, slash - start));
      out.end.push_back(slash);
    }
    start = slash + 1;
  }
  return out;
}

bool is_param(const std::string& segment) {
  return segment.size() > 2 && segment.front() == '{' && segment.back() == '}';
}

}  // namespace

std::vector<std::string> split_path(const std::string& path) { return segments_of(path).text; }

size_t Router::add(std::string method, std::string pattern) {
  Route route{routes_.size(), std::move(method), pattern, split_path(pattern), ""};
  if (!route.segments.empty()) {
    const std::string& last = route.segments.back();
    if (last.size() > 5 && last.starts_with("{") && last.ends_with("...}")) {
      route.rest = last.substr(1, last.size() - 5);
      route.segments.pop_back();
    }
  }
  routes_.push_back(std::move(route));
  return routes_.size() - 1;
}

Match Router::match(const std::string& method, const std::string& path) const {
  Segments segments = segments_of(path);
  const std::vector<std::string>& text = segments.text;
  Match result;
  for (const Route& route : routes_) {
    size_t fixed = route.segments.size();
    if (route.rest.empty() ? text.size() != fixed : text.size() <= fixed) continue;
    std::map<std::string, std::string> params;
    bool ok = true;
    for (size_t i = 0; i < fixed && ok; ++i) {
      const std::string& want = route.segments[i];
      if (is_param(want)) {
        params[want.substr(1, want.size() - 2)] = text[i];
      } else {
        ok = want == text[i];
      }
    }
    if (!ok) continue;
    if (!route.rest.empty()) {
      // Past the last fixed segment and the one slash after it (there is one: more segments follow).
      size_t from = fixed == 0 ? 1 : segments.end[fixed - 1] + 1;
      params[route.rest] = path.substr(from);
    }
    if (route.method != method) {
      result.method_mismatch = true;
      continue;
    }
    result.route = &route;
    result.params = std::move(params);
    result.method_mismatch = false;
    return result;
  }
  return result;
}

}  // namespace cnlab::server

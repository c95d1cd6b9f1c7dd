#include "server/router.h"

namespace cnlab::server {

std::vector<std::string> split_path(const std::string& path) {
  std::vector<std::string> segments;
  size_t start = 0;
  while (start <= path.size()) {
    size_t slash = path.find('/', start);
    if (slash == std::string::npos) slash = path.size();
    if (slash > start) segments.push_back(path.substr(start, slash - start));
    start = slash + 1;
  }
  return segments;
}

size_t Router::add(std::string method, std::string pattern) {
  Route route{routes_.size(), std::move(method), pattern, split_path(pattern)};
  routes_.push_back(std::move(route));
  return routes_.size() - 1;
}

Match Router::match(const std::string& method, const std::string& path) const {
  std::vector<std::string> segments = split_path(path);
  Match result;
  for (const Route& route : routes_) {
    if (route.segments.size() != segments.size()) continue;
    std::map<std::string, std::string> params;
    bool ok = true;
    for (size_t i = 0; i < segments.size() && ok; ++i) {
      const std::string& want = route.segments[i];
      if (want.size() > 2 && want.front() == '{' && want.back() == '}') {
        params[want.substr(1, want.size() - 2)] = segments[i];
      } else {
        ok = want == segments[i];
      }
    }
    if (!ok) continue;
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

// Maps a method and a path pattern ("/v1/jobs/{id}/cancel") to a handler. Segments in braces bind
// path parameters; a last segment "{name...}" binds the rest of the path (one or more segments);
// a path that matches a pattern under another method gets 405.
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "net/net.h"

namespace cnlab::server {

struct Route {
  size_t index = 0;  // position in the order routes were added: the caller's handler table
  std::string method;
  std::string pattern;  // also the metrics label: bounded, unlike raw paths
  std::vector<std::string> segments;
  std::string rest;  // the parameter a trailing "{name...}" binds, else empty; not in `segments`
};

struct Match {
  const Route* route = nullptr;
  // A trailing "{name...}" parameter is the path after the fixed segments' slash, exactly as
  // decoded: its segments joined with '/', with any empty, "." or ".." segment kept for the
  // handler to refuse ("/v1/x//etc/passwd" binds "/etc/passwd").
  std::map<std::string, std::string> params;
  bool method_mismatch = false;  // the path exists under another method
};

class Router {
 public:
  // Returns the route's index.
  size_t add(std::string method, std::string pattern);
  Match match(const std::string& method, const std::string& path) const;
  const std::vector<Route>& routes() const { return routes_; }

 private:
  std::vector<Route> routes_;
};

std::vector<std::string> split_path(const std::string& path);

}  // namespace cnlab::server

// Downloads a finished job's artifacts into a local directory: each path checked (relative, no
// `.`/`..` segment), each file written beside its place and renamed over it only once its SHA-256
// matches the server's listing.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "common/result.h"
#include "net/net.h"

namespace cnlab::cli {

struct DownloadedArtifacts {
  std::string dir;
  int64_t files = 0;
  int64_t bytes = 0;
  std::vector<std::string> problems;  // "results/x.csv: sha256 differs ..." for files not written
};

// Whether an artifact path from the server may be written under the destination: relative, 1..32
// segments, none empty, `.` or `..`, no NUL or backslash.
bool safe_artifact_path(const std::string& path);

// Lists and downloads job `job`'s artifacts into `dir` (created when there is something to write).
// A listing that fails is an Error; a file that fails is a problem, and the others are still written.
Result<DownloadedArtifacts> download_artifacts(net::Client& api, const std::string& job, const std::string& dir);

}  // namespace cnlab::cli

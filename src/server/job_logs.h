// A job's stdout and stderr as its agent ships them: numbered lines appended durably to one file per
// job under the data directory, read back from any sequence number, and followed live. An agent that
// resends lines after a reconnect gets them skipped (sequence numbers at or below the last stored),
// so no line is shown twice and none is lost once acknowledged.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"

namespace cnlab::server {

struct LogLine {
  int64_t seq = 0;
  std::string stream;  // "stdout" or "stderr"
  std::string time;    // RFC 3339 as the agent saw it
  std::string text;
};
Json to_json(const LogLine& line);
// Errors name `path` (e.g. "lines[3].seq").
Result<LogLine> log_line_from_json(const Json& json, const std::string& path);

class JobLogs {
 public:
  JobLogs(std::string dir, size_t max_bytes_per_job);

  // Appends the lines numbered above the last stored one, in order, and syncs them to disk.
  // Returns the last stored sequence number. kTooLarge past the per-job limit.
  Result<int64_t> append(const std::string& job, const std::vector<LogLine>& lines);
  // Lines with seq >= from_seq, at most `limit`.
  Result<std::vector<LogLine>> read(const std::string& job, int64_t from_seq, size_t limit);
  int64_t last_seq(const std::string& job);

  // Calls `on_lines` with each batch appended after this call, until the returned handle is
  // destroyed (a call already under way may still finish). Runs on the appending thread; must not
  // block. The handle may be dropped from anywhere, a follower's own callback included.
  using Follower = std::function<void(const std::vector<LogLine>&)>;
  std::shared_ptr<void> follow(const std::string& job, Follower on_lines);

 private:
  struct State {
    int64_t last_seq = -1;  // -1: not read from disk yet
    size_t bytes = 0;
    struct Entry {
      std::shared_ptr<std::atomic<bool>> alive;
      Follower on_lines;
    };
    std::vector<Entry> followers;
  };
  State& state_locked(const std::string& job);
  std::string path_of(const std::string& job) const;

  std::string dir_;
  size_t max_bytes_;
  std::mutex mutex_;
  std::map<std::string, State> jobs_;
};

}  // namespace cnlab::server

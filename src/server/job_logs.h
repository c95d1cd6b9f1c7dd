// A job's stdout and stderr as its agents ship them: numbered lines appended durably to one file per
// job under the data directory, read back from any sequence number, and followed live.
//
// Two numbers per line. The server numbers a job's lines itself (`seq`, from 1, in the order they
// are stored), so the members of a gang job, each on its own node, share one log. Each agent numbers
// its own lines (`node_seq`); a line whose node_seq is not above the last stored from that node is
// skipped, so an agent that resends after a reconnect or a server restart gets nothing shown twice
// and, once acknowledged, nothing lost. The per-node watermarks are rebuilt from the file.
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
  int64_t seq = 0;       // the server's number: per job, from 1, in the order stored
  std::string node;      // the node whose agent shipped it ("" in logs written before lines named it)
  int64_t node_seq = 0;  // the agent's number: per node, increasing
  std::string stream;    // "stdout" or "stderr"
  std::string time;      // RFC 3339 as the agent saw it
  std::string text;
};
// The API's form: {"seq", "node", "stream", "time", "text"}.
Json to_json(const LogLine& line);
// A line as an agent posts it, {"seq", "stream", "time", "text"}: its `seq` is the agent's own and
// becomes `node_seq`. Errors name `path` (e.g. "lines[3].seq").
Result<LogLine> posted_log_line_from_json(const Json& json, const std::string& path);

class JobLogs {
 public:
  JobLogs(std::string dir, size_t max_bytes_per_job);

  struct Appended {
    int64_t last_seq = 0;       // the job's last stored line (server seq); 0 for none
    int64_t last_node_seq = 0;  // the last node_seq stored from this node; 0 for none
  };
  // Appends, in order, the lines whose node_seq is above the last stored from `node`, numbering them
  // after the job's last line, and syncs them to disk. kTooLarge past the per-job limit.
  Result<Appended> append(const std::string& job, const std::string& node, std::vector<LogLine> lines);
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
    bool loaded = false;  // read from disk yet
    int64_t last_seq = 0;
    std::map<std::string, int64_t> last_node_seq;  // per node
    size_t bytes = 0;
    bool torn = false;  // the file ends in a line cut short by a crash (no newline)
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

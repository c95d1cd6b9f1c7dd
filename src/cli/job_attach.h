// Following a job to its end, for `cnlab run` and `cnlab logs -f`: its log lines as they are printed
// (a second connection follows the log stream; when the job has ended, the rest is read without
// follow and the stream is interrupted, since the server's follow stream does not end with the
// job), its state on a status line while it waits (only on a terminal; a plain line per change
// otherwise), and a cancel on the first Ctrl-C.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "common/json_reader.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::cli {

// Writes to the terminal from several threads: log lines, state lines, and a status line that is
// redrawn below them (only when stderr is a terminal).
class Console {
 public:
  Console();
  bool tty() const { return tty_; }
  bool colour() const { return colour_; }
  // A job's log line (`raw` printed as is with -o json).
  void log_line(const Json& line, std::string_view raw, bool json, bool prefix_node);
  // A line for the user on stderr (a state change, a notice).
  void note(const std::string& text);
  // Replaces the status line (a terminal only; "" clears it).
  void status(const std::string& text);
  // "\x1b[1;32m" + text + reset when colour is on.
  std::string paint(const std::string& text, const char* code) const;

 private:
  void clear_locked();
  std::mutex mutex_;
  bool tty_ = false;
  bool colour_ = false;
  std::string status_;
};

// Follows one job's log on its own connection and thread, printing each line once, in order.
class LogFollower {
 public:
  using OnLine = std::function<void(const Json& line, std::string_view raw)>;
  LogFollower(const net::ClientOptions& options, std::string job, int64_t from_seq, OnLine on_line);
  ~LogFollower();
  // Starts following (kUnavailable when the connection cannot be made).
  Status start();
  // Stops following, then reads what is left through `api` without follow: every line up to the
  // end of the log is printed exactly once.
  Status finish(net::Client& api);
  int64_t next_seq() const { return next_seq_.load(); }

 private:
  void run();
  // Splits `data` into lines, printing those not printed yet; keeps an unfinished line in pending_.
  void take(std::string_view data);

  net::ClientOptions options_;
  std::string job_;
  OnLine on_line_;
  std::unique_ptr<net::Client> client_;
  std::thread thread_;
  std::atomic<bool> stopping_{false};
  std::atomic<int64_t> next_seq_;
  std::string pending_;
};

// Reads the log from `from_seq` to its end without follow, page by page; returns the next seq.
Result<int64_t> read_log(net::Client& api, const std::string& job, int64_t from_seq, const LogFollower::OnLine& on_line);

bool job_finished(const Json& job);

struct AttachOptions {
  bool json_lines = false;  // print log lines as the server's ndjson
  bool show_state = true;   // status line / state-change lines (off for `cnlab logs -f`)
  int64_t from_seq = 0;
  // Ctrl-C presses so far (set by the caller's signal handler); on the first, the job is cancelled.
  const std::atomic<int>* interrupts = nullptr;
};

struct AttachResult {
  Json job;                   // as it ended
  bool cancelled_here = false;  // this command asked for the cancel (Ctrl-C)
};

// Follows `job` until it has ended and its log is printed to the end. `api` polls the job (every
// 200 ms); the log follows on a second connection made from `options`.
Result<AttachResult> attach_job(net::Client& api, const net::ClientOptions& options, const std::string& job,
                                Console& console, const AttachOptions& attach);

}  // namespace cnlab::cli

// What the server benchmarks share: the real `cnlab server` as a child process on a fresh data
// directory (as users and agents meet it: TLS, tokens, the REST API), clients for it, and what the
// benchmarks read about it (its metrics, its memory, its CPU time), plus small-stack threads and
// percentiles.
#pragma once

// Boost 1.74's Asio under C++20 with GCC 12 needs <utility> first (net.h includes it too).
#include <utility>

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"
#include "net/net.h"

namespace cnlab::bench {

using Clock = std::chrono::steady_clock;

inline double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
inline int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch()).count();
}

// A fresh directory under $TMPDIR (a disk, not tmpfs, on the build machine: fsync is real), removed
// with everything in it.
// Starts `args` (argv[0] the binary) with stderr appended to `log`; returns its pid and the first
// line it prints on stdout (how the server and the agent say they are up).
std::pair<pid_t, std::string> spawn_first_line(std::vector<std::string> args, const std::string& log);

class TempDir {
 public:
  explicit TempDir(const std::string& prefix);
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

// `cnlab server` in a child process: initialised with `cnlab server init`, serving on
// 127.0.0.1:0 (the first stdout line names the URL), its log in DIR/server.log.
class ServerProcess {
 public:
  static Result<std::unique_ptr<ServerProcess>> start(const std::string& data_dir,
                                                      const std::vector<std::string>& extra);
  ~ServerProcess();
  ServerProcess(const ServerProcess&) = delete;
  ServerProcess& operator=(const ServerProcess&) = delete;

  const std::string& url() const { return url_; }
  std::string ca() const { return data_dir_ + "/ca.pem"; }
  const std::string& admin_token() const { return admin_token_; }
  pid_t pid() const { return pid_; }

  // From /proc/PID/status: resident memory now (VmRSS) and its peak (VmHWM), KiB; -1 when gone.
  int64_t rss_kib() const;
  int64_t peak_rss_kib() const;
  // User + system CPU time the server has used so far.
  double cpu_seconds() const;

  // A client over TLS, trusting the data directory's CA, with `token` ("" for none).
  Result<std::unique_ptr<net::Client>> client(const std::string& token,
                                              std::chrono::milliseconds timeout = std::chrono::seconds(30)) const;

  // SIGTERM, then SIGKILL if it has not exited after `grace`. Idempotent.
  void stop(std::chrono::seconds grace = std::chrono::seconds(15));

 private:
  ServerProcess() = default;
  int64_t status_field(const char* name) const;

  std::string data_dir_;
  std::string url_;
  std::string admin_token_;
  pid_t pid_ = -1;
};

// A request that must answer with `status`; returns its parsed body, or an error naming the
// request and what came back.
Result<Json> call(net::Client& client, const std::string& method, const std::string& target, int status,
                  const Json& body = nullptr, const std::map<std::string, std::string>& headers = {});

// A node object as an agent registers it: `gpus` simulated GPUs of `gpu_model`.
Json node_object(const std::string& name, const std::string& gpu_model, int gpus);

// Registers `node` with the join token `join_token` through `anonymous` (a client with no token);
// returns the node's credential.
Result<std::string> register_node(net::Client& anonymous, const std::string& join_token, const Json& node);

// A new join token, minted by the admin.
Result<std::string> join_token(net::Client& admin);

// The Prometheus text of GET /metrics, and the value of one series in it (the series as rendered,
// e.g. `cnlab_store_commit_seconds_sum` or `cnlab_http_request_duration_seconds_count{route="POST /v1/jobs"}`).
struct MetricsText {
  std::string text;
  double value(const std::string& series) const;  // 0 when absent
};
Result<MetricsText> scrape(net::Client& admin);

// The value of `"revision":` first met in a watch event line (the object's metadata.revision: the
// line's keys are sorted, and "object" and "metadata" come before anything else that could hold
// it), or -1.
int64_t first_revision(std::string_view line);

struct Percentiles {
  size_t n = 0;
  double p50 = 0, p90 = 0, p99 = 0, max = 0, mean = 0;
};
Percentiles percentiles(std::vector<double> values);

// Threads with small stacks, for a thousand blocking watch streams on two cores.
class Threads {
 public:
  explicit Threads(size_t stack_bytes = 256 << 10) : stack_bytes_(stack_bytes) {}
  ~Threads() { join(); }
  void spawn(std::function<void()> body);
  void join();
  size_t size() const { return threads_.size(); }

 private:
  size_t stack_bytes_;
  std::vector<unsigned long> threads_;  // pthread_t
};

// This process's user + system CPU time so far (all threads).
double own_cpu_seconds();

// The machine's CPU time so far from /proc/stat, all cores together: busy (not idle or iowait), of
// which interrupts and softirqs (where loopback TCP is processed, charged to no process).
struct MachineCpu {
  double busy = 0, irq = 0;
};
MachineCpu machine_cpu();
// The 1-minute load average.
double load_average();

}  // namespace cnlab::bench

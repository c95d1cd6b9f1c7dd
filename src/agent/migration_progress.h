// While a migration's source dumps, packs and sends a job, the server hears every few seconds that
// it is still at it (PUT /v1/jobs/{id}/status with `migration_progress`), so that its
// --migration-timeout counts from the latest word instead of from the request: a dump of many GiB
// takes longer than the timeout and still moves, and a source that falls silent is still given up.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <string>
#include <thread>

#include "agent/server_api.h"

namespace cnlab::agent {

class MigrationProgress {
 public:
  // Reports job `job`'s stage every `every`, on its own connection, until destroyed.
  MigrationProgress(ServerAddress server, std::string token, std::string job, std::chrono::milliseconds every);
  ~MigrationProgress();
  MigrationProgress(const MigrationProgress&) = delete;
  MigrationProgress& operator=(const MigrationProgress&) = delete;

  // What the source does now ("dumping", "packing 3.2 GiB", ...), sent with the next report.
  void stage(std::string what);
  // Whether the server refused a report because no such migration is under way any more (it timed
  // out and was rolled back, or the job was cancelled): the move no longer waits for this node.
  bool refused() const { return refused_.load(); }

 private:
  void report_until_stopped(std::chrono::milliseconds every);

  ServerApi api_;
  const std::string job_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::string stage_;
  bool stopping_ = false;
  std::atomic<bool> refused_{false};
  std::thread thread_;
};

}  // namespace cnlab::agent

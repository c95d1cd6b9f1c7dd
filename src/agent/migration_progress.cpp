#include "agent/migration_progress.h"

#include <spdlog/spdlog.h>

#include <utility>

namespace cnlab::agent {

MigrationProgress::MigrationProgress(ServerAddress server, std::string token, std::string job,
                                     std::chrono::milliseconds every)
    : api_(std::move(server), std::move(token)), job_(std::move(job)), stage_("starting") {
  thread_ = std::thread([this, every] { report_until_stopped(every); });
}

MigrationProgress::~MigrationProgress() {
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  api_.interrupt();  // a report waiting on the server returns at once
  thread_.join();
}

void MigrationProgress::stage(std::string what) {
  std::lock_guard lock(mutex_);
  stage_ = std::move(what);
}

void MigrationProgress::report_until_stopped(std::chrono::milliseconds every) {
  std::unique_lock lock(mutex_);
  while (!wake_.wait_for(lock, every, [this] { return stopping_; })) {
    const Json body = {{"phase", "Running"}, {"migration_progress", stage_}};
    lock.unlock();
    auto told = api_.call("PUT", "/v1/jobs/" + job_ + "/status", body.dump());
    if (!told) {
      spdlog::warn("migration progress not reported job=\"{}\" error=\"{}\"", job_, told.error().to_string());
      const ErrorCode code = told.error().code;
      if (code == ErrorCode::kConflict || code == ErrorCode::kNotFound) refused_ = true;
    }
    lock.lock();
  }
}

}  // namespace cnlab::agent

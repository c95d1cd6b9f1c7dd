// A background pass run every `period` until stopped (node lifecycle, idle reclaim): one thread,
// stopped promptly (a condition variable, not a sleep) and joined by stop() or the destructor.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace cnlab::server {

class Periodic {
 public:
  ~Periodic() { stop(); }
  void start(std::chrono::milliseconds period, std::function<void()> pass) {
    thread_ = std::thread([this, period, pass = std::move(pass)] {
      std::unique_lock lock(mutex_);
      while (!cv_.wait_for(lock, period, [this] { return stopping_; })) {
        lock.unlock();
        pass();
        lock.lock();
      }
    });
  }
  void stop() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  bool stopping_ = false;
  std::thread thread_;
};

}  // namespace cnlab::server

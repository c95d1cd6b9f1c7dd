#include "store/watch_hub.h"

#include <algorithm>
#include <string>
#include <utility>

namespace cnlab::store {

namespace {

// Events per on_events call: a long replay reaches a consumer in pieces it can bound.
constexpr size_t kMaxEventsPerCall = 1024;

}  // namespace

struct WatchHub::Watcher {
  uint64_t id = 0;
  std::string kind;
  std::string prefix;
  int64_t after = 0;  // live events must be newer than this
  Store::WatchCallbacks callbacks;
  std::deque<Event> pending;
  bool ready = false;
  bool cancelled = false;  // cancelled or closed: no more callbacks
};

namespace {

class HubWatchHandle : public Store::WatchHandle {
 public:
  HubWatchHandle(std::shared_ptr<WatchHub> hub, std::shared_ptr<WatchHub::Watcher> watcher)
      : hub_(std::move(hub)), watcher_(std::move(watcher)) {}
  ~HubWatchHandle() override { hub_->cancel(watcher_); }

 private:
  std::shared_ptr<WatchHub> hub_;
  std::shared_ptr<WatchHub::Watcher> watcher_;
};

}  // namespace

WatchHub::WatchHub(size_t max_queued_batches) : max_queued_batches_(std::max<size_t>(1, max_queued_batches)) {}

WatchHub::~WatchHub() {
  if (thread_.joinable()) close(Error::of(ErrorCode::kUnavailable, "", "", "the store is closed"));
}

void WatchHub::start() {
  std::lock_guard lock(mu_);
  thread_ = std::thread([this] { run(); });
  notifier_id_ = thread_.get_id();
}

Result<WatchHub::Registration> WatchHub::add(std::string kind, std::string prefix, int64_t from_revision,
                                             Store::WatchCallbacks callbacks, bool ready) {
  auto watcher = std::make_shared<Watcher>();
  watcher->kind = std::move(kind);
  watcher->prefix = std::move(prefix);
  watcher->callbacks = std::move(callbacks);
  watcher->ready = ready;
  std::lock_guard lock(mu_);
  if (stopping_) return Error::of(ErrorCode::kUnavailable, "", "", "the store is closed");
  watcher->id = next_id_++;
  watcher->after = std::max(from_revision, published_);
  watchers_.emplace(watcher->id, watcher);
  return Registration{std::move(watcher), published_};
}

void WatchHub::ready(const std::shared_ptr<Watcher>& watcher, std::vector<Event> replay) {
  std::lock_guard lock(mu_);
  if (watcher->cancelled) return;
  watcher->pending.insert(watcher->pending.begin(), std::make_move_iterator(replay.begin()),
                          std::make_move_iterator(replay.end()));
  watcher->ready = true;
  wake_ = true;
  work_cv_.notify_one();
}

void WatchHub::cancel(const std::shared_ptr<Watcher>& watcher) {
  std::unique_lock lock(mu_);
  watcher->cancelled = true;
  watcher->pending.clear();
  watchers_.erase(watcher->id);
  if (on_notifier_thread()) return;  // inside a callback: it finishes, nothing runs after it
  done_cv_.wait(lock, [&] { return delivering_ != watcher.get(); });
}

std::unique_ptr<Store::WatchHandle> WatchHub::handle(std::shared_ptr<Watcher> watcher) {
  return std::make_unique<HubWatchHandle>(shared_from_this(), std::move(watcher));
}

void WatchHub::publish(int64_t revision, const std::function<void(std::vector<Event>&)>& build) {
  std::unique_lock lock(mu_);
  if (stopping_) return;
  if (!watchers_.empty()) {
    space_cv_.wait(lock, [&] { return queue_.size() < max_queued_batches_ || stopping_; });
    std::vector<Event> events;
    build(events);
    if (!events.empty()) {
      queue_.push_back(std::move(events));
      work_cv_.notify_one();
    }
  }
  published_ = revision;
}

void WatchHub::close(const Error& reason) {
  CNLAB_CHECK_MSG(!on_notifier_thread(), "Store::close() called from a watch callback");
  std::unique_lock lock(mu_);
  if (!stopping_) {
    stopping_ = true;
    reason_ = reason;
    work_cv_.notify_one();
    space_cv_.notify_all();
  }
  if (!thread_.joinable()) {
    end_all(lock);  // never started: nothing to dispatch
    return;
  }
  lock.unlock();
  thread_.join();
}

void WatchHub::run() {
  std::unique_lock lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return !queue_.empty() || wake_ || stopping_; });
    wake_ = false;
    while (!queue_.empty()) {
      std::vector<Event> batch = std::move(queue_.front());
      queue_.pop_front();
      distribute(batch);
    }
    space_cv_.notify_all();
    std::vector<std::shared_ptr<Watcher>> due;
    for (auto& [id, watcher] : watchers_) {
      if (watcher->ready && !watcher->pending.empty()) due.push_back(watcher);
    }
    for (const auto& watcher : due) deliver(watcher, lock);
    if (stopping_ && queue_.empty()) break;
  }
  end_all(lock);
}

void WatchHub::distribute(std::vector<Event>& batch) {
  for (auto& [id, watcher] : watchers_) {
    for (const Event& event : batch) {
      const Record& record = event.record;
      if (record.mod_revision <= watcher->after || record.kind != watcher->kind ||
          !record.key.starts_with(watcher->prefix)) {
        continue;
      }
      watcher->pending.push_back(event);
    }
  }
}

void WatchHub::deliver(const std::shared_ptr<Watcher>& watcher, std::unique_lock<std::mutex>& lock) {
  while (!watcher->cancelled && !watcher->pending.empty()) {
    size_t count = std::min(kMaxEventsPerCall, watcher->pending.size());
    std::vector<Event> events(std::make_move_iterator(watcher->pending.begin()),
                              std::make_move_iterator(watcher->pending.begin() + static_cast<ptrdiff_t>(count)));
    watcher->pending.erase(watcher->pending.begin(), watcher->pending.begin() + static_cast<ptrdiff_t>(count));
    if (!watcher->callbacks.on_events) continue;
    delivering_ = watcher.get();
    lock.unlock();
    watcher->callbacks.on_events(events);
    lock.lock();
    delivering_ = nullptr;
    done_cv_.notify_all();
  }
}

void WatchHub::end_all(std::unique_lock<std::mutex>& lock) {
  auto remaining = std::move(watchers_);
  watchers_.clear();
  for (auto& [id, watcher] : remaining) {
    if (watcher->cancelled) continue;
    watcher->cancelled = true;
    watcher->pending.clear();
    if (!watcher->callbacks.on_close) continue;
    delivering_ = watcher.get();
    lock.unlock();
    watcher->callbacks.on_close(reason_);
    lock.lock();
    delivering_ = nullptr;
    done_cv_.notify_all();
  }
}

}  // namespace cnlab::store

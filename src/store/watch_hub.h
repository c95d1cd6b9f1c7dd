// Private to src/store: hands committed changes to watchers on one notifier thread.
//
// The writer publishes each committed batch in revision order; the hub queues it (a bounded
// queue of batches not yet dispatched: the writer waits only for the notifier, which never waits
// for a consumer) and the notifier thread filters it into each watcher's pending events and
// calls the watchers. A watcher registers under the hub lock and learns the last published
// revision P: everything up to P is committed and readable from the database (its replay), and
// everything after P reaches it through the queue (its live events), so there is no gap and,
// because live events are filtered to revisions after max(from, P), no duplicate.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "store/store.h"

namespace cnlab::store {

class WatchHub : public std::enable_shared_from_this<WatchHub> {
 public:
  struct Watcher;
  struct Registration {
    std::shared_ptr<Watcher> watcher;
    int64_t published = 0;  // the last published revision when it registered
  };

  explicit WatchHub(size_t max_queued_batches);
  ~WatchHub();
  WatchHub(const WatchHub&) = delete;
  WatchHub& operator=(const WatchHub&) = delete;

  // Starts the notifier thread.
  void start();

  // Registers a watcher of `kind` keys starting with `prefix`, for live events after
  // max(from_revision, published). Unless `ready`, its events wait until ready() hands over the
  // replay of what came before. kUnavailable once the hub is closing.
  Result<Registration> add(std::string kind, std::string prefix, int64_t from_revision, Store::WatchCallbacks callbacks,
                           bool ready);
  // Puts `replay` (events up to the registration's published revision) before the live events
  // queued so far and lets the notifier deliver them.
  void ready(const std::shared_ptr<Watcher>& watcher, std::vector<Event> replay);
  // Unregisters; when it returns no callback of the watcher runs any more, except that a call from
  // inside the watcher's own callback returns at once and that callback finishes normally.
  void cancel(const std::shared_ptr<Watcher>& watcher);
  // A handle whose destructor cancels.
  std::unique_ptr<Store::WatchHandle> handle(std::shared_ptr<Watcher> watcher);

  // Called by the writer after each commit, in revision order. `build` appends the commit's
  // events; it runs under the hub lock and only when someone watches. Waits while the queue of
  // undispatched batches is full.
  void publish(int64_t revision, const std::function<void(std::vector<Event>&)>& build);

  // Dispatches what is queued, ends every watch with `reason` (on_close) and stops the notifier.
  // The writer must have stopped publishing. Not from a watch callback.
  void close(const Error& reason);

  bool on_notifier_thread() const { return std::this_thread::get_id() == notifier_id_; }

 private:
  void run();
  void distribute(std::vector<Event>& batch);
  void deliver(const std::shared_ptr<Watcher>& watcher, std::unique_lock<std::mutex>& lock);
  void end_all(std::unique_lock<std::mutex>& lock);

  const size_t max_queued_batches_;
  std::mutex mu_;
  std::condition_variable work_cv_;   // notifier: a batch, a ready watcher, or stop
  std::condition_variable space_cv_;  // writer: room in the queue
  std::condition_variable done_cv_;   // cancel(): the notifier left a watcher's callback
  std::deque<std::vector<Event>> queue_;
  std::map<uint64_t, std::shared_ptr<Watcher>> watchers_;
  uint64_t next_id_ = 1;
  int64_t published_ = 0;
  bool wake_ = false;
  bool stopping_ = false;
  Error reason_;
  const Watcher* delivering_ = nullptr;  // whose callback the notifier is inside
  std::thread thread_;
  std::thread::id notifier_id_;
};

}  // namespace cnlab::store

// One store watch per kind, shared by every HTTP watch of that kind. Each change is parsed and
// printed once, then handed only to the watchers it can concern: with a router (jobs: the nodes in
// their placement), a watcher of one node hears of the changes on that node and of the jobs that
// just left it, not of the other 999 nodes' changes. Unrouted watchers see every change and filter
// for themselves.
//
// A watcher from an older revision first gets the store's history up to what the fan-out has
// delivered, then the live changes it held meanwhile: the same exactly-once, in-order contract as a
// store watch. Subscribers' filters and sinks run under the fan-out's lock, one change at a time in
// revision order, so their own state needs no lock; they must not block (a stream's push only
// queues).
#pragma once

#include <functional>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include "common/json_reader.h"
#include "store/store.h"

namespace cnlab::server {

// A change as every watcher sees it, parsed and serialised once.
struct WatchedChange {
  int64_t revision = 0;
  std::string key;
  bool deleted = false;
  Json object;       // with metadata.revision set; not an object when the record did not parse
  std::string line;  // {"object":...,"type":"ADDED"|"MODIFIED"|"DELETED"}\n
  std::vector<std::string> routes;  // from the router: where the object is now
};

std::string watch_line(const char* type, const Json& object);

class WatchFanout {
 public:
  // Names the routes of an object (appends to `routes`); the same object may name none.
  using Router = std::function<void(const Json& object, std::vector<std::string>& routes)>;

  struct Subscriber {
    std::string route;  // "" hears every change; otherwise only changes routed to it, now or before
    // Appends what the watcher should send for a change to `out` (nothing when it is not visible).
    std::function<void(const WatchedChange& change, std::string& out)> filter;
    // Takes a batch of lines; called with the fan-out's lock held, must not block.
    std::function<void(std::string text)> send;
    // The store ended the watch (closing); called once, with the lock held.
    std::function<void(const Error& error)> end;

   private:
    friend class WatchFanout;
    int64_t after = 0;          // it wants the changes after this revision
    bool catching_up = false;   // its history is being read; live changes wait in `held`
    std::vector<std::shared_ptr<const WatchedChange>> held;
    std::string pending;        // this batch's output
    bool removed = false;
  };

  WatchFanout(store::Store& store, std::string kind, Router router);
  ~WatchFanout();
  WatchFanout(const WatchFanout&) = delete;
  WatchFanout& operator=(const WatchFanout&) = delete;

  // Opens the shared store watch. Call once, before subscribe.
  Status start();

  // Adds a watcher of the changes after `revision` (0: from now on). Its history, if any, is
  // read before this returns and passed through its filter and sink; kGone when it is older than
  // the store keeps (the watcher is then not added). `routed_now` are the keys the caller knows to
  // be on the subscriber's route: objects placed there before the fan-out started are routed
  // there when they leave (a route too many costs a filter call; one too few, a lost DELETED).
  Status subscribe(const std::shared_ptr<Subscriber>& subscriber, int64_t revision,
                   const std::vector<std::string>& routed_now = {});
  void unsubscribe(const std::shared_ptr<Subscriber>& subscriber);

  size_t subscribers() const;

 private:
  std::shared_ptr<const WatchedChange> parse(const store::Event& event) const;
  void on_events(const std::vector<store::Event>& events);
  void on_close(const Error& error);
  // Feeds one change to a subscriber (lock held).
  static void offer(Subscriber& subscriber, const std::shared_ptr<const WatchedChange>& change,
                    std::vector<Subscriber*>& touched);
  static void flush(std::vector<Subscriber*>& touched);

  store::Store& store_;
  const std::string kind_;
  const Router router_;
  std::unique_ptr<store::Store::WatchHandle> handle_;

  mutable std::mutex mutex_;
  int64_t delivered_ = 0;  // every change up to this revision has been offered
  bool ended_ = false;
  std::vector<std::shared_ptr<Subscriber>> everything_;                             // route ""
  std::unordered_map<std::string, std::vector<std::shared_ptr<Subscriber>>> routed_;  // by route
  // Where each routed object was at its last change, so the watchers there hear that it left.
  std::unordered_map<std::string, std::vector<std::string>> last_routes_;
};

}  // namespace cnlab::server

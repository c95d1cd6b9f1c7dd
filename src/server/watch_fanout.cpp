#include "server/watch_fanout.h"

#include <algorithm>
#include <utility>

namespace cnlab::server {
namespace {

const char* event_type(const store::Event& event) {
  return event.type == store::EventType::kDelete ? "DELETED" : event.created ? "ADDED" : "MODIFIED";
}

void erase_subscriber(std::vector<std::shared_ptr<WatchFanout::Subscriber>>& list, const WatchFanout::Subscriber* s) {
  auto it = std::find_if(list.begin(), list.end(), [s](const auto& p) { return p.get() == s; });
  if (it == list.end()) return;
  std::swap(*it, list.back());  // order among watchers does not matter
  list.pop_back();
}

}  // namespace

std::string watch_line(const char* type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

WatchFanout::WatchFanout(store::Store& store, std::string kind, Router router)
    : store_(store), kind_(std::move(kind)), router_(std::move(router)) {}

WatchFanout::~WatchFanout() { handle_.reset(); }

Status WatchFanout::start() {
  // From an explicit revision, not "from now": the watch then covers every change after the
  // revision it records as delivered, with nothing lost between reading it and registering.
  int64_t from = store_.revision();
  {
    std::lock_guard lock(mutex_);
    delivered_ = from;
  }
  store::Store::WatchCallbacks callbacks;
  callbacks.on_events = [this](const std::vector<store::Event>& events) { on_events(events); };
  callbacks.on_close = [this](const Error& error) { on_close(error); };
  auto handle = store_.watch(kind_, "", from, std::move(callbacks));
  if (!handle) return handle.error();
  handle_ = std::move(*handle);
  return Status::ok();
}

std::shared_ptr<const WatchedChange> WatchFanout::parse(const store::Event& event) const {
  auto change = std::make_shared<WatchedChange>();
  change->revision = event.record.mod_revision;
  change->key = event.record.key;
  change->deleted = event.type == store::EventType::kDelete;
  change->object = Json::parse(event.record.value, nullptr, false);
  if (change->object.is_object()) {
    change->object["metadata"]["revision"] = event.record.mod_revision;
    change->line = watch_line(event_type(event), change->object);
    if (router_ && !change->deleted) router_(change->object, change->routes);
  }
  return change;
}

void WatchFanout::offer(Subscriber& subscriber, const std::shared_ptr<const WatchedChange>& change,
                        std::vector<Subscriber*>& touched) {
  // Several changes may share a revision (one transaction), so `after` is a fixed threshold.
  if (subscriber.removed || change->revision <= subscriber.after) return;
  if (subscriber.catching_up) {
    subscriber.held.push_back(change);
    return;
  }
  if (!change->object.is_object()) return;
  bool was_empty = subscriber.pending.empty();
  subscriber.filter(*change, subscriber.pending);
  if (was_empty && !subscriber.pending.empty()) touched.push_back(&subscriber);
}

void WatchFanout::flush(std::vector<Subscriber*>& touched) {
  for (Subscriber* subscriber : touched) {
    if (!subscriber->pending.empty()) subscriber->send(std::exchange(subscriber->pending, {}));
  }
  touched.clear();
}

void WatchFanout::on_events(const std::vector<store::Event>& events) {
  // Parse outside the lock: subscribing and unsubscribing do not wait for it.
  std::vector<std::shared_ptr<const WatchedChange>> changes;
  changes.reserve(events.size());
  for (const auto& event : events) changes.push_back(parse(event));

  std::lock_guard lock(mutex_);
  std::vector<Subscriber*> touched;
  std::vector<const std::string*> routes;
  for (const auto& change : changes) {
    for (const auto& subscriber : everything_) offer(*subscriber, change, touched);
    if (router_) {
      // The routes it is on now and those it was on before (it may have just left them).
      routes.clear();
      // Each once: a watcher must not get one change twice.
      auto add = [&](const std::string& route) {
        bool seen = std::any_of(routes.begin(), routes.end(), [&](const std::string* r) { return *r == route; });
        if (!seen) routes.push_back(&route);
      };
      for (const auto& route : change->routes) add(route);
      auto last = last_routes_.find(change->key);
      if (last != last_routes_.end()) {
        for (const auto& route : last->second) add(route);
      }
      for (const std::string* route : routes) {
        auto it = routed_.find(*route);
        if (it == routed_.end()) continue;
        for (const auto& subscriber : it->second) offer(*subscriber, change, touched);
      }
      if (change->routes.empty()) {
        if (last != last_routes_.end()) last_routes_.erase(last);
      } else if (last != last_routes_.end()) {
        last->second = change->routes;
      } else {
        last_routes_.emplace(change->key, change->routes);
      }
    }
    delivered_ = change->revision;
  }
  flush(touched);
}

void WatchFanout::on_close(const Error& error) {
  std::lock_guard lock(mutex_);
  ended_ = true;
  auto end = [&](const std::shared_ptr<Subscriber>& subscriber) {
    if (subscriber->removed) return;
    subscriber->removed = true;
    if (subscriber->end) subscriber->end(error);
  };
  for (const auto& subscriber : everything_) end(subscriber);
  for (const auto& [route, list] : routed_) {
    for (const auto& subscriber : list) end(subscriber);
  }
  everything_.clear();
  routed_.clear();
}

Status WatchFanout::subscribe(const std::shared_ptr<Subscriber>& subscriber, int64_t revision,
                              const std::vector<std::string>& routed_now) {
  int64_t history_to = 0;
  {
    std::lock_guard lock(mutex_);
    if (ended_) return Error::of(ErrorCode::kUnavailable, "", "", "the store is closed");
    subscriber->after = revision == 0 ? delivered_ : revision;
    subscriber->catching_up = subscriber->after < delivered_;
    history_to = delivered_;
    if (subscriber->route.empty()) {
      everything_.push_back(subscriber);
    } else {
      CNLAB_CHECK_MSG(router_ != nullptr, "a routed watcher of an unrouted kind");
      routed_[subscriber->route].push_back(subscriber);
      for (const auto& key : routed_now) {
        auto& routes = last_routes_[key];
        if (std::find(routes.begin(), routes.end(), subscriber->route) == routes.end()) routes.push_back(subscriber->route);
      }
    }
  }
  if (!subscriber->catching_up) return Status::ok();

  // Read what it missed without holding the lock (a long history must not stall everyone else);
  // live changes after `history_to` wait in `held` meanwhile.
  auto history = store_.history(kind_, "", subscriber->after, history_to);
  if (!history) {
    unsubscribe(subscriber);
    return history.error();
  }
  std::vector<std::shared_ptr<const WatchedChange>> replay;
  replay.reserve(history->size());
  for (const auto& event : *history) replay.push_back(parse(event));

  std::lock_guard lock(mutex_);
  std::vector<Subscriber*> touched;
  subscriber->catching_up = false;
  for (const auto& change : replay) offer(*subscriber, change, touched);
  auto held = std::move(subscriber->held);
  for (const auto& change : held) offer(*subscriber, change, touched);
  flush(touched);
  return Status::ok();
}

void WatchFanout::unsubscribe(const std::shared_ptr<Subscriber>& subscriber) {
  std::lock_guard lock(mutex_);
  subscriber->removed = true;
  subscriber->held.clear();
  if (subscriber->route.empty()) {
    erase_subscriber(everything_, subscriber.get());
    return;
  }
  auto it = routed_.find(subscriber->route);
  if (it == routed_.end()) return;
  erase_subscriber(it->second, subscriber.get());
  if (it->second.empty()) routed_.erase(it);
}

size_t WatchFanout::subscribers() const {
  std::lock_guard lock(mutex_);
  size_t n = everything_.size();
  for (const auto& [route, list] : routed_) n += list.size();
  return n;
}

}  // namespace cnlab::server

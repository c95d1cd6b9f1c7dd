// `?watch=1&revision=N` on a collection: a chunked stream of JSON lines, one per change after N,
// {"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}. A revision older than the kept history
// gets 410 with "resync from revision N" before the stream starts (the client lists and watches
// again); a client that reads too slowly is cut off by the stream's backlog bound.
#include <map>
#include <unordered_set>

#include "server/api.h"
#include "server/api_error.h"
#include "server/watch_fanout.h"

namespace cnlab::server {
namespace {

// Open watch streams per caller and in all: a client that opens streams without end gets 429
// instead of exhausting the server. A slot is held for as long as its stream (or the response that
// would start it) exists.
class StreamSlots {
 public:
  static constexpr int kPerCaller = 1000;
  static constexpr int kTotal = 20000;

  struct Slot {
    StreamSlots* owner;
    std::string caller;
    ~Slot() { owner->release(caller); }
  };
  // Null when the caller, or the server, has no slot left.
  std::shared_ptr<Slot> acquire(const std::string& caller) {
    std::lock_guard lock(mutex_);
    int& mine = open_[caller];
    if (mine >= kPerCaller || total_ >= kTotal) return nullptr;
    ++mine;
    ++total_;
    return std::shared_ptr<Slot>(new Slot{this, caller});  // not make_shared(Slot{...}): that temporary would release
  }

 private:
  void release(const std::string& caller) {
    std::lock_guard lock(mutex_);
    if (--open_[caller] == 0) open_.erase(caller);
    --total_;
  }

  std::mutex mutex_;
  std::map<std::string, int> open_;
  int total_ = 0;
};

StreamSlots& stream_slots() {
  static StreamSlots slots;
  return slots;
}

// What a watch may hold before its stream opens (the history it replays arrives at once): past
// this, the watcher is told to resync instead.
constexpr size_t kMaxEarlyBytes = 32 << 20;

struct WatchState {
  std::mutex mutex;
  std::shared_ptr<net::Stream> stream;
  std::string early;  // what arrived before the stream was open
  bool overflowed = false;
  bool closed = false;
  bool ended = false;  // the store ended the watch
  std::function<void()> unsubscribe;

  void send(std::string text) {
    std::lock_guard lock(mutex);
    if (closed || overflowed) return;
    if (stream) {
      stream->push(std::move(text));
    } else if (early.size() + text.size() > kMaxEarlyBytes) {
      overflowed = true;
      early.clear();
    } else {
      early += text;
    }
  }
};

}  // namespace

Result<WatchFanout*> Api::fanout_of(const std::string& kind) {
  std::lock_guard lock(fanouts_mutex_);
  auto& fanout = fanouts_[kind];
  if (!fanout) {
    WatchFanout::Router router;
    if (kind == kind::kJobs) {
      // A job is routed to the nodes it is bound to: their agents' watches hear of it.
      router = [](const Json& job, std::vector<std::string>& routes) {
        const Json& status = job["status"];
        auto placement = status.find("placement");
        if (placement == status.end() || !placement->is_array()) return;
        for (const auto& binding : *placement) {
          auto node = binding.find("node");
          if (node != binding.end() && node->is_string()) routes.push_back(node->get<std::string>());
        }
      };
    }
    fanout = std::make_unique<WatchFanout>(ctx_.store, kind, std::move(router));
    if (auto ok = fanout->start(); !ok) {
      fanouts_.erase(kind);  // the store is closing; a later watch tries again
      return ok.error();
    }
  }
  return fanout.get();
}

net::Response Api::watch(const Call& call, const std::string& kind, std::function<bool(const Json&)> visible,
                         std::string route, bool report_leaving, std::vector<std::string> visible_now) {
  std::string text = call.request.query_value("revision");
  int64_t revision = 0;
  if (!text.empty()) {
    char* end = nullptr;
    revision = std::strtoll(text.c_str(), &end, 10);
    if (*end != '\0' || revision < 0) return error_response(Error::invalid_argument("revision", text, "expected a revision >= 0"));
  }
  auto slot = stream_slots().acquire(call.caller.user);
  if (!slot) {
    return error_response(Error::of(ErrorCode::kResourceExhausted, "watch", call.caller.user,
                                    "too many open streams (at most " + std::to_string(StreamSlots::kPerCaller) +
                                        " per caller); close some first"));
  }
  auto state = std::make_shared<WatchState>();
  auto subscriber = std::make_shared<WatchFanout::Subscriber>();
  subscriber->route = std::move(route);
  // Touched only under the fan-out's lock, one change at a time.
  auto matching = std::make_shared<std::unordered_set<std::string>>(visible_now.begin(), visible_now.end());
  subscriber->filter = [visible, report_leaving, matching](const WatchedChange& change, std::string& out) {
    if (!visible(change.object)) {
      if (report_leaving && matching->erase(change.key) > 0) out += watch_line("DELETED", change.object);  // it left this view
      return;
    }
    if (report_leaving) {
      if (change.deleted) {
        matching->erase(change.key);
      } else {
        matching->insert(change.key);
      }
    }
    out += change.line;
  };
  subscriber->send = [state](std::string text) { state->send(std::move(text)); };
  subscriber->end = [state](const Error& error) {
    Json line = {{"type", "ERROR"}, {"error", {{"code", api_code(error.code)}, {"message", error.to_string()}}}};
    state->send(line.dump() + "\n");
    std::lock_guard lock(state->mutex);
    state->ended = true;
    if (state->stream) state->stream->finish();
  };
  auto fanout = fanout_of(kind);
  if (!fanout) return error_response(fanout.error());
  if (auto ok = (*fanout)->subscribe(subscriber, revision, visible_now); !ok) return error_response(ok.error());
  {
    std::lock_guard lock(state->mutex);
    state->unsubscribe = [fanout = *fanout, subscriber] { fanout->unsubscribe(subscriber); };
  }
  Metrics& metrics = ctx_.metrics;
  net::Response response;
  response.content_type = "application/x-ndjson";
  response.start_stream = [state, &metrics, slot](std::shared_ptr<net::Stream> stream) {
    metrics.watchers.inc({}, 1);
    {
      std::lock_guard lock(state->mutex);
      state->stream = stream;
      if (state->overflowed) {
        Json line = {{"type", "ERROR"},
                     {"error", {{"code", "gone"}, {"message", "the history since this revision is too large to replay; "
                                                            "list and watch from the list's revision"}}}};
        stream->push(line.dump() + "\n");
        stream->finish();
      } else if (!state->early.empty()) {
        stream->push(std::move(state->early));
      }
      if (state->ended) stream->finish();
      state->early.clear();
    }
    stream->on_close([state, &metrics, slot]() {
      std::function<void()> unsubscribe;
      {
        std::lock_guard lock(state->mutex);
        state->closed = true;
        unsubscribe = std::move(state->unsubscribe);
      }
      if (unsubscribe) unsubscribe();  // outside the lock: the fan-out may be sending to it right now
      metrics.watchers.inc({}, -1);
    });
  };
  return response;
}

}  // namespace cnlab::server

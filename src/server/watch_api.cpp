// `?watch=1&revision=N` on a collection: a chunked stream of JSON lines, one per change after N,
// {"type": "ADDED"|"MODIFIED"|"DELETED", "object": {...}}. A revision older than the kept history
// gets 410 with "resync from revision N" before the stream starts (the client lists and watches
// again); a client that reads too slowly is cut off by the stream's backlog bound.
#include <deque>
#include <unordered_set>
#include <map>
#include <unordered_map>

#include "server/api.h"
#include "server/api_error.h"

namespace cnlab::server {
namespace {

const char* event_type(const store::Event& event) {
  return event.type == store::EventType::kDelete ? "DELETED" : event.created ? "ADDED" : "MODIFIED";
}

std::string watch_line(const char* type, const Json& object) {
  return Json{{"type", type}, {"object", object}}.dump(-1, ' ', false, Json::error_handler_t::replace) + "\n";
}

// A recent event parsed and serialised once, shared by every watcher: a thousand watchers of one
// kind parse and print each change once, not a thousand times.
struct ParsedEvent {
  Json object;       // with metadata.revision set; not an object if the record did not parse
  std::string line;  // the watch line for the event's own type
};

class ParsedEvents {
 public:
  std::shared_ptr<const ParsedEvent> get(const store::Event& event) {
    const store::Record& record = event.record;
    std::string key = record.kind;
    key += '\n';
    key += std::to_string(record.mod_revision);
    key += '\n';
    key += record.key;
    key += event_type(event)[0];
    std::lock_guard lock(mutex_);
    auto it = parsed_.find(key);
    if (it != parsed_.end()) return it->second;
    auto parsed = std::make_shared<ParsedEvent>();
    parsed->object = Json::parse(record.value, nullptr, false);
    if (parsed->object.is_object()) {
      parsed->object["metadata"]["revision"] = record.mod_revision;
      parsed->line = watch_line(event_type(event), parsed->object);
    }
    parsed_.emplace(key, parsed);
    order_.push_back(std::move(key));
    if (order_.size() > kKept) {
      parsed_.erase(order_.front());
      order_.pop_front();
    }
    return parsed;
  }

 private:
  static constexpr size_t kKept = 8192;
  std::mutex mutex_;
  std::unordered_map<std::string, std::shared_ptr<const ParsedEvent>> parsed_;
  std::deque<std::string> order_;
};

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

ParsedEvents& parsed_events() {
  static ParsedEvents events;
  return events;
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
  std::unique_ptr<store::Store::WatchHandle> handle;

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

net::Response Api::watch(const Call& call, const std::string& kind, std::function<bool(const Json&)> visible,
                         bool report_leaving, std::vector<std::string> visible_now) {
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
  store::Store::WatchCallbacks callbacks;
  // Touched only on the store's notifier thread, which delivers this watcher's events one batch
  // at a time.
  auto matching = std::make_shared<std::unordered_set<std::string>>(visible_now.begin(), visible_now.end());
  callbacks.on_events = [state, visible, report_leaving, matching](const std::vector<store::Event>& events) {
    std::string out;
    for (const auto& event : events) {
      auto parsed = parsed_events().get(event);
      if (!parsed->object.is_object()) continue;
      bool deleted = event.type == store::EventType::kDelete;
      if (!visible(parsed->object)) {
        if (!report_leaving || matching->erase(event.record.key) == 0) continue;
        out += watch_line("DELETED", parsed->object);  // it left this watch's view
        continue;
      }
      if (report_leaving) {
        if (deleted) {
          matching->erase(event.record.key);
        } else {
          matching->insert(event.record.key);
        }
      }
      out += parsed->line;
    }
    if (!out.empty()) state->send(std::move(out));
  };
  callbacks.on_close = [state](const Error& error) {
    Json line = {{"type", "ERROR"}, {"error", {{"code", api_code(error.code)}, {"message", error.to_string()}}}};
    state->send(line.dump() + "\n");
    std::lock_guard lock(state->mutex);
    if (state->stream) state->stream->finish();
  };
  auto handle = ctx_.store.watch(kind, "", revision, std::move(callbacks));
  if (!handle) return error_response(handle.error());
  {
    std::lock_guard lock(state->mutex);
    state->handle = std::move(*handle);
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
      state->early.clear();
    }
    stream->on_close([state, &metrics, slot]() {
      std::unique_ptr<store::Store::WatchHandle> handle;
      {
        std::lock_guard lock(state->mutex);
        state->closed = true;
        handle = std::move(state->handle);
      }
      handle.reset();  // outside the lock: the store may be delivering to this watcher right now
      metrics.watchers.inc({}, -1);
    });
  };
  return response;
}

}  // namespace cnlab::server

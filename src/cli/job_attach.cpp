#include "cli/job_attach.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>

#include "common/time.h"

namespace cnlab::cli {
namespace {

using namespace std::chrono_literals;

Time system_now() { return std::chrono::time_point_cast<Duration>(std::chrono::system_clock::now()); }

void write_all(FILE* out, std::string_view text) {
  std::fwrite(text.data(), 1, text.size(), out);
  std::fflush(out);
}

std::string nodes_of(const Json& status) {
  std::string nodes;
  for (const auto& binding : status.value("placement", Json::array())) {
    nodes += (nodes.empty() ? "" : ", ") + binding.value("node", std::string());
  }
  return nodes.empty() ? "?" : nodes;
}

// The state line of a job: "queued (position 2, estimated start 14:05): needs 2 whole h100 ...".
std::string state_text(const Json& status) {
  const std::string phase = status.value("phase", "");
  if (phase == "Pending") {
    std::string detail;
    if (status.contains("queue_position")) detail = "position " + std::to_string(status["queue_position"].get<int64_t>());
    if (status.contains("estimated_start")) {
      auto at = parse_rfc3339(status["estimated_start"].get<std::string>(), "estimated_start");
      if (at) detail += (detail.empty() ? "" : ", ") + std::string("estimated start ") + format_time_near(*at, system_now());
    }
    std::string text = "queued";
    if (!detail.empty()) text += " (" + detail + ")";
    std::string reason = status.value("waiting_reason", "");
    if (!reason.empty()) text += ": " + reason;
    return text;
  }
  if (phase == "Scheduled") return "starting on node " + nodes_of(status);
  if (phase == "Running") return "running on node " + nodes_of(status);
  return phase;
}

}  // namespace

Console::Console() {
  tty_ = ::isatty(STDERR_FILENO) == 1;
  const char* no_colour = std::getenv("NO_COLOR");
  colour_ = tty_ && !(no_colour && *no_colour);
}

void Console::clear_locked() {
  if (tty_ && !status_.empty()) write_all(stderr, "\r\x1b[K");
}

void Console::log_line(const Json& line, std::string_view raw, bool json, bool prefix_node) {
  std::lock_guard lock(mutex_);
  clear_locked();
  status_.clear();  // a job that prints has started: the waiting line is done
  if (json) {
    write_all(stdout, std::string(raw) + "\n");
  } else {
    std::string text = line.value("text", "");
    if (prefix_node) text = "[" + line.value("node", std::string()) + "] " + text;
    write_all(line.value("stream", "stdout") == "stderr" ? stderr : stdout, text + "\n");
  }
}

void Console::note(const std::string& text) {
  std::lock_guard lock(mutex_);
  clear_locked();
  write_all(stderr, text + "\n");
  if (tty_ && !status_.empty()) write_all(stderr, status_);
}

void Console::status(const std::string& text) {
  if (!tty_) return;
  std::lock_guard lock(mutex_);
  clear_locked();
  status_ = text;
  if (!status_.empty()) write_all(stderr, status_);
}

std::string Console::paint(const std::string& text, const char* code) const {
  return colour_ ? std::string(code) + text + "\x1b[0m" : text;
}

LogFollower::LogFollower(const net::ClientOptions& options, std::string job, int64_t from_seq, OnLine on_line)
    : options_(options), job_(std::move(job)), on_line_(std::move(on_line)), next_seq_(from_seq) {
  // A quiet job sends nothing for a while; the stream is then made again from the next line.
  options_.timeout = std::chrono::minutes(5);
}

LogFollower::~LogFollower() {
  stopping_ = true;
  if (client_) client_->interrupt();
  if (thread_.joinable()) thread_.join();
}

Status LogFollower::start() {
  auto client = net::Client::connect(options_);
  if (!client) return client.error();
  client_ = std::move(*client);
  thread_ = std::thread([this] { run(); });
  return Status::ok();
}

void LogFollower::take(std::string_view data) {
  pending_.append(data);
  size_t begin = 0;
  for (size_t end; (end = pending_.find('\n', begin)) != std::string::npos; begin = end + 1) {
    std::string_view raw(pending_.data() + begin, end - begin);
    if (raw.empty()) continue;
    Json line = Json::parse(raw, nullptr, false);
    if (!line.is_object()) continue;
    int64_t seq = line.value("seq", int64_t{-1});
    if (seq < next_seq_.load()) continue;  // already printed (a stream made again overlaps)
    on_line_(line, raw);
    next_seq_ = seq + 1;
  }
  pending_.erase(0, begin);
}

void LogFollower::run() {
  while (!stopping_) {
    pending_.clear();
    auto streamed = client_->stream("GET", "/v1/jobs/" + job_ + "/logs?follow=1&from_seq=" + std::to_string(next_seq_.load()),
                                    [this](std::string_view chunk) {
                                      if (stopping_) return false;
                                      take(chunk);
                                      return true;
                                    });
    (void)streamed;
    // Broken off, timed out or refused: the job's watcher decides when to stop; follow again soon.
    for (int i = 0; i < 5 && !stopping_; ++i) std::this_thread::sleep_for(100ms);
  }
}

Status LogFollower::finish(net::Client& api) {
  stopping_ = true;
  if (client_) client_->interrupt();
  if (thread_.joinable()) thread_.join();
  auto next = read_log(api, job_, next_seq_.load(), on_line_);
  if (!next) return next.error();
  next_seq_ = *next;
  return Status::ok();
}

Result<int64_t> read_log(net::Client& api, const std::string& job, int64_t from_seq, const LogFollower::OnLine& on_line) {
  for (;;) {
    auto page = api.request("GET", "/v1/jobs/" + job + "/logs?from_seq=" + std::to_string(from_seq));
    if (!page) return page.error();
    if (page->status != 200) return net::error_from_response(page->status, page->body, "");
    size_t lines = 0;
    std::string_view body = page->body;
    while (!body.empty()) {
      size_t end = body.find('\n');
      std::string_view raw = body.substr(0, end);
      body = end == std::string_view::npos ? std::string_view() : body.substr(end + 1);
      if (raw.empty()) continue;
      Json line = Json::parse(raw, nullptr, false);
      if (!line.is_object()) continue;
      int64_t seq = line.value("seq", int64_t{-1});
      if (seq < from_seq) continue;
      on_line(line, raw);
      from_seq = seq + 1;
      ++lines;
    }
    if (lines < 100000) return from_seq;  // the server answers at most 100,000 lines at a time
  }
}

bool job_finished(const Json& job) {
  std::string phase = job["status"].value("phase", "");
  return phase == "Succeeded" || phase == "Failed" || phase == "Cancelled";
}

Result<AttachResult> attach_job(net::Client& api, const net::ClientOptions& options, const std::string& job,
                                Console& console, const AttachOptions& attach) {
  AttachResult result;
  bool prefix_node = false;
  LogFollower follower(options, job, attach.from_seq, [&](const Json& line, std::string_view raw) {
    console.log_line(line, raw, attach.json_lines, prefix_node);
  });
  bool following = false;
  bool cancel_sent = false;
  std::string last_key;
  auto last_answer = std::chrono::steady_clock::now();
  const char spinner[] = {'|', '/', '-', '\\'};
  for (int tick = 0;; ++tick) {
    if (attach.interrupts && attach.interrupts->load() > 0 && !cancel_sent) {
      cancel_sent = true;
      result.cancelled_here = true;
      console.status("");
      console.note("cnlab: cancelling job " + job + " (press Ctrl-C again to leave at once; the job is then left to stop on its own)");
      auto cancelled = api.request("POST", "/v1/jobs/" + job + "/cancel", "{}", {{"content-type", "application/json"}});
      if (!cancelled) {
        console.note("cnlab: the cancel did not reach the server: " + cancelled.error().to_string());
      } else if (cancelled->status != 200 && cancelled->status != 409) {
        console.note("cnlab: " + net::error_from_response(cancelled->status, cancelled->body, "cancel").to_string());
      }
    }
    auto got = api.request("GET", "/v1/jobs/" + job);
    if (!got) {
      // The server may be restarting: keep trying for a minute, then give up (the job goes on).
      if (std::chrono::steady_clock::now() - last_answer > std::chrono::minutes(1)) return got.error();
      std::this_thread::sleep_for(1s);
      continue;
    }
    last_answer = std::chrono::steady_clock::now();
    if (got->status != 200) return net::error_from_response(got->status, got->body, "");
    Json current = Json::parse(got->body, nullptr, false);
    if (!current.is_object() || !current["status"].is_object()) return Error::internal("the server's job is not an object");
    const Json& status = current["status"];
    prefix_node = status.value("placement", Json::array()).size() > 1;
    if (!following) {
      if (auto started = follower.start(); !started) return started.error();
      following = true;
    }
    if (job_finished(current)) {
      console.status("");
      if (auto drained = follower.finish(api); !drained) return drained.error();
      result.job = std::move(current);
      return result;
    }
    if (attach.show_state) {
      const std::string phase = status.value("phase", "");
      std::string line = state_text(status);
      // A change of state: the phase, the scheduler's reason, or the nodes (not the position).
      std::string key = phase + "|" + status.value("waiting_reason", "") + "|" + nodes_of(status);
      if (console.tty() && phase == "Pending") {
        console.status(std::string(1, spinner[tick % 4]) + " " + line);
      } else if (key != last_key) {
        console.status("");
        console.note(line);
      }
      last_key = key;
    }
    std::this_thread::sleep_for(200ms);
  }
}

}  // namespace cnlab::cli

#include "server/job_logs.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace cnlab::server {
namespace {

// The file's form: the API's, plus the agent's own number.
Json stored_json(const LogLine& line) {
  Json j = to_json(line);
  j["node_seq"] = line.node_seq;
  return j;
}

// A line of the file. Lines written before they named their node have neither "node" nor
// "node_seq": their seq was the (one) agent's, so it serves as both.
Result<LogLine> stored_line_from_json(const Json& json) {
  JsonReader r(json, "log");
  r.only({"seq", "node", "node_seq", "stream", "time", "text"});
  LogLine line;
  line.seq = r.integer_or("seq", -1, 0, INT64_MAX);
  if (r.status() && line.seq < 0) r.fail(Error::invalid_argument(r.path_of("seq"), "", "required field is missing"));
  line.node = r.string_or("node", "");
  line.node_seq = r.integer_or("node_seq", line.seq, 0, INT64_MAX);
  line.stream = r.string_or("stream", "stdout");
  line.time = r.string_or("time", "");
  line.text = r.string("text");
  if (!r.status()) return r.status().error();
  return line;
}

void write_line(std::string& out, const Json& line) {
  out += line.dump(-1, ' ', false, Json::error_handler_t::replace);
  out += '\n';
}

// The last node_seq stored from `node`. Lines from before lines named their node count for every
// node: the log then knew only one.
int64_t watermark(const std::map<std::string, int64_t>& marks, const std::string& node) {
  int64_t mark = 0;
  for (const std::string& key : {node, std::string()}) {
    auto it = marks.find(key);
    if (it != marks.end()) mark = std::max(mark, it->second);
  }
  return mark;
}

}  // namespace

Json to_json(const LogLine& line) {
  return {{"seq", line.seq}, {"node", line.node}, {"stream", line.stream}, {"time", line.time}, {"text", line.text}};
}

Result<LogLine> posted_log_line_from_json(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  r.only({"seq", "stream", "time", "text"});
  LogLine line;
  line.node_seq = r.integer_or("seq", -1, 0, INT64_MAX);
  if (r.status() && line.node_seq < 0) r.fail(Error::invalid_argument(r.path_of("seq"), "", "required field is missing"));
  line.stream = r.string_or("stream", "stdout");
  if (r.status() && line.stream != "stdout" && line.stream != "stderr") {
    r.fail(Error::invalid_argument(r.path_of("stream"), line.stream, "expected \"stdout\" or \"stderr\""));
  }
  line.time = r.string_or("time", "");
  line.text = r.string("text");
  if (!r.status()) return r.status().error();
  return line;
}

JobLogs::JobLogs(std::string dir, size_t max_bytes_per_job) : dir_(std::move(dir)), max_bytes_(max_bytes_per_job) {
  std::error_code ec;
  std::filesystem::create_directories(dir_, ec);
}

std::string JobLogs::path_of(const std::string& job) const { return dir_ + "/" + job + ".jsonl"; }

JobLogs::State& JobLogs::state_locked(const std::string& job) {
  State& state = jobs_[job];
  if (state.loaded) return state;
  state.loaded = true;
  std::ifstream in(path_of(job), std::ios::binary);
  std::string text;
  while (std::getline(in, text)) {
    // A last line without its newline was cut short by a crash before the sync: it was never
    // acknowledged. The next append starts on a new line, so the fragment stays apart.
    state.torn = in.eof();
    state.bytes += text.size() + (state.torn ? 0 : 1);
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_object()) continue;
    auto line = stored_line_from_json(j);
    if (!line) continue;
    state.last_seq = std::max(state.last_seq, line->seq);
    int64_t& mark = state.last_node_seq[line->node];
    mark = std::max(mark, line->node_seq);
  }
  return state;
}

Result<JobLogs::Appended> JobLogs::append(const std::string& job, const std::string& node, std::vector<LogLine> lines) {
  std::lock_guard lock(mutex_);
  State& state = state_locked(job);
  int64_t seq = state.last_seq;
  int64_t node_mark = watermark(state.last_node_seq, node);
  std::string out;
  std::vector<LogLine> appended;
  for (LogLine& line : lines) {
    if (line.node_seq <= node_mark) continue;
    node_mark = line.node_seq;
    line.seq = ++seq;
    line.node = node;
    write_line(out, stored_json(line));
    appended.push_back(std::move(line));
  }
  if (appended.empty()) return Appended{state.last_seq, node_mark};
  if (state.torn) out.insert(out.begin(), '\n');
  if (state.bytes + out.size() > max_bytes_) {
    return Error::of(ErrorCode::kTooLarge, "lines", std::to_string(out.size()) + " bytes",
                     "the job's log is over its limit of " + std::to_string(max_bytes_) + " bytes");
  }
  int fd = ::open(path_of(job).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return Error::internal("open log of job " + job + ": " + std::strerror(errno));
  struct stat before {};
  if (::fstat(fd, &before) != 0) {
    int error = errno;
    ::close(fd);
    return Error::internal("stat log of job " + job + ": " + std::strerror(error));
  }
  bool ok = ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size()) && ::fdatasync(fd) == 0;
  int error = errno;
  // Unacknowledged lines must not stay behind: a resend would find them stored and skip them.
  bool restored = ok || ::ftruncate(fd, before.st_size) == 0;
  ::close(fd);
  if (!ok) {
    if (!restored) {  // where the file ends is unknown now: read it again on next use
      auto followers = std::move(state.followers);
      state = State{};
      state.followers = std::move(followers);
    }
    return Error::internal("write log of job " + job + ": " + std::strerror(error));
  }
  state.bytes += out.size();
  state.torn = false;
  state.last_seq = seq;
  state.last_node_seq[node] = node_mark;
  std::erase_if(state.followers, [](const State::Entry& e) { return !e.alive->load(); });
  for (auto& follower : state.followers) follower.on_lines(appended);
  return Appended{state.last_seq, node_mark};
}

Result<std::vector<LogLine>> JobLogs::read(const std::string& job, int64_t from_seq, size_t limit) {
  std::vector<LogLine> lines;
  std::ifstream in(path_of(job), std::ios::binary);
  std::string text;
  while (lines.size() < limit && std::getline(in, text)) {
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_object()) continue;
    auto line = stored_line_from_json(j);
    if (line && line->seq >= from_seq) lines.push_back(std::move(*line));
  }
  return lines;
}

int64_t JobLogs::last_seq(const std::string& job) {
  std::lock_guard lock(mutex_);
  return state_locked(job).last_seq;
}

std::shared_ptr<void> JobLogs::follow(const std::string& job, Follower on_lines) {
  auto alive = std::make_shared<std::atomic<bool>>(true);
  std::lock_guard lock(mutex_);
  state_locked(job).followers.push_back({alive, std::move(on_lines)});
  // No lock in the deleter: it may run inside a follower, under this object's lock.
  return std::shared_ptr<void>(nullptr, [alive](void*) { alive->store(false); });
}

}  // namespace cnlab::server

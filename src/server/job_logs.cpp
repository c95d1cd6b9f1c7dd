#include "server/job_logs.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>

namespace cnlab::server {

Json to_json(const LogLine& line) {
  return {{"seq", line.seq}, {"stream", line.stream}, {"time", line.time}, {"text", line.text}};
}

Result<LogLine> log_line_from_json(const Json& json, const std::string& path) {
  JsonReader r(json, path);
  r.only({"seq", "stream", "time", "text"});
  LogLine line;
  line.seq = r.integer_or("seq", -1, 0, INT64_MAX);
  if (r.status() && line.seq < 0) r.fail(Error::invalid_argument(r.path_of("seq"), "", "required field is missing"));
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
  if (state.last_seq >= 0) return state;
  state.last_seq = 0;
  std::ifstream in(path_of(job));
  std::string text;
  while (std::getline(in, text)) {
    state.bytes += text.size() + 1;
    Json j = Json::parse(text, nullptr, false);
    // A torn last line (a crash mid-write before the sync) is ignored: it was never acknowledged.
    if (j.is_object() && j.contains("seq") && j["seq"].is_number_integer()) state.last_seq = j["seq"].get<int64_t>();
  }
  return state;
}

Result<int64_t> JobLogs::append(const std::string& job, const std::vector<LogLine>& lines) {
  std::lock_guard lock(mutex_);
  State& state = state_locked(job);
  std::string out;
  std::vector<LogLine> appended;
  int64_t last = state.last_seq;
  for (const LogLine& line : lines) {
    if (line.seq <= last) continue;
    last = line.seq;
    out += to_json(line).dump(-1, ' ', false, Json::error_handler_t::replace);
    out += '\n';
    appended.push_back(line);
  }
  if (out.empty()) return state.last_seq;
  if (state.bytes + out.size() > max_bytes_) {
    return Error::of(ErrorCode::kTooLarge, "lines", std::to_string(out.size()) + " bytes",
                     "the job's log is over its limit of " + std::to_string(max_bytes_) + " bytes");
  }
  int fd = ::open(path_of(job).c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0640);
  if (fd < 0) return Error::internal("open log of job " + job + ": " + std::strerror(errno));
  bool ok = ::write(fd, out.data(), out.size()) == static_cast<ssize_t>(out.size()) && ::fdatasync(fd) == 0;
  ::close(fd);
  if (!ok) return Error::internal("write log of job " + job + ": " + std::strerror(errno));
  state.bytes += out.size();
  state.last_seq = last;
  std::erase_if(state.followers, [](const State::Entry& e) { return !e.alive->load(); });
  for (auto& follower : state.followers) follower.on_lines(appended);
  return state.last_seq;
}

Result<std::vector<LogLine>> JobLogs::read(const std::string& job, int64_t from_seq, size_t limit) {
  std::vector<LogLine> lines;
  std::ifstream in(path_of(job));
  std::string text;
  while (lines.size() < limit && std::getline(in, text)) {
    Json j = Json::parse(text, nullptr, false);
    if (!j.is_object()) continue;
    auto line = log_line_from_json(j, "log");
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

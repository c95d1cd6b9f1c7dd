// Starts the real `cnlab` binary as a server on a fresh data directory (port 0, loopback) and talks
// to it over TLS, as users and agents would. Used by the end-to-end API tests.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "common/json_reader.h"
#include "net/net.h"

namespace cnlab::server::test_support {

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnlab_server_test_XXXXXX").string();
    if (mkdtemp(pattern.data()) == nullptr) std::abort();
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

inline std::string slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream text;
  text << in.rdbuf();
  std::string s = text.str();
  while (!s.empty() && (s.back() == '\n' || s.back() == '\r')) s.pop_back();
  return s;
}

// Runs `cnlab ARGS...`, returning its exit status and what it printed (stdout and stderr).
inline std::pair<int, std::string> run_cnlab(const std::vector<std::string>& args) {
  std::string command = std::string(CNLAB_BINARY);
  for (const auto& a : args) command += " '" + a + "'";
  command += " 2>&1";
  FILE* pipe = ::popen(command.c_str(), "r");
  std::string out;
  char buffer[4096];
  size_t n;
  while ((n = std::fread(buffer, 1, sizeof(buffer), pipe)) > 0) out.append(buffer, n);
  int status = ::pclose(pipe);
  return {WIFEXITED(status) ? WEXITSTATUS(status) : -1, out};
}

// The whole of /proc/<pid>/<file> ("cmdline", "environ"), or "" when it cannot be read. Plain
// read(2): a process that exits meanwhile fails the read with ESRCH, which std::ifstream would
// turn into an exception.
inline std::string read_proc_file(const std::filesystem::path& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return "";
  std::string content;
  char buffer[4096];
  for (ssize_t n; (n = ::read(fd, buffer, sizeof buffer)) > 0;) content.append(buffer, static_cast<size_t>(n));
  ::close(fd);
  return content;
}

// Whether a process other than this one has `marker` in its command line.
inline bool process_with(const std::string& marker) {
  const std::string self = std::to_string(::getpid());
  bool found = false;
  std::error_code ec;
  for (auto it = std::filesystem::directory_iterator("/proc", ec); !ec && it != std::filesystem::directory_iterator();
       it.increment(ec)) {
    const std::string pid = it->path().filename();
    if (pid.empty() || !std::isdigit(static_cast<unsigned char>(pid[0])) || pid == self) continue;
    if (read_proc_file(it->path() / "cmdline").find(marker) != std::string::npos) found = true;
  }
  return found;
}

// Starts `args` (argv[0] is the binary) with stderr appended to `log`; returns its pid and what it
// printed on stdout up to and including the first line that starts with `last` (the first line
// when `last` is empty; how the server and the agent say they are up), without the final newline.
inline std::pair<pid_t, std::string> spawn_cnlab(std::vector<std::string> args, const std::string& log,
                                                 const std::string& last = "") {
  int out[2];
  if (::pipe(out) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(out[1], 1);
    ::close(out[0]);
    ::close(out[1]);
    FILE* err = std::fopen(log.c_str(), "a");
    if (err) ::dup2(fileno(err), 2);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(out[1]);
  std::string printed;
  size_t line_start = 0;
  char c;
  while (::read(out[0], &c, 1) == 1) {
    if (c != '\n') {
      printed += c;
      continue;
    }
    if (printed.compare(line_start, last.size(), last) == 0) break;
    printed += c;
    line_start = printed.size();
  }
  ::close(out[0]);
  return {pid, printed};
}

class ServerProcess {
 public:
  // Initialises `data_dir` unless it already is, and starts the server with `extra` flags.
  explicit ServerProcess(std::string data_dir, std::vector<std::string> extra = {}) : data_dir_(std::move(data_dir)) {
    if (!std::filesystem::exists(data_dir_ + "/signing.key")) {
      auto [status, out] = run_cnlab({"server", "init", "--data-dir", data_dir_});
      if (status != 0) throw std::runtime_error("cnlab server init failed: " + out);
    }
    start(std::move(extra));
  }
  ~ServerProcess() { stop(SIGTERM); }

  void start(std::vector<std::string> extra) {
    std::vector<std::string> args = {CNLAB_BINARY, "server", "--data-dir", data_dir_, "--listen", listen_};
    for (auto& e : extra) args.push_back(e);
    std::string line;
    std::tie(pid_, line) = spawn_cnlab(args, data_dir_ + "/server.log");
    const std::string prefix = "listening on ";
    if (line.rfind(prefix, 0) != 0) {
      stop(SIGKILL);
      throw std::runtime_error("server did not start: \"" + line + "\"; log: " + slurp(data_dir_ + "/server.log"));
    }
    url_ = line.substr(prefix.size());
    // A restart of this server comes back on the same port, where its clients and agents look.
    listen_ = "127.0.0.1:" + url_.substr(url_.rfind(':') + 1);
  }

  // SIGTERM for a clean stop, SIGKILL for a crash.
  void stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
  }
  bool running() const {
    if (pid_ <= 0) return false;
    return ::waitpid(pid_, nullptr, WNOHANG) == 0;
  }

  const std::string& url() const { return url_; }
  const std::string& data_dir() const { return data_dir_; }
  // The most memory the server has held resident since it started (VmHWM), in KiB; -1 unknown.
  int64_t peak_resident_kib() const {
    const std::string status = read_proc_file("/proc/" + std::to_string(pid_) + "/status");
    const size_t at = status.find("VmHWM:");
    return at == std::string::npos ? -1 : std::stoll(status.substr(at + 6));
  }
  std::string ca() const { return data_dir_ + "/ca.pem"; }
  std::string admin_token() const { return slurp(data_dir_ + "/admin.token"); }

  std::unique_ptr<net::Client> client(const std::string& token) const {
    auto c = net::Client::connect({url_, ca(), token});
    if (!c) throw std::runtime_error(c.error().to_string());
    return std::move(*c);
  }

 private:
  std::string data_dir_;
  std::string url_;
  std::string listen_ = "127.0.0.1:0";
  pid_t pid_ = -1;
};

// A request that must answer with `status`; returns the parsed body.
inline Json call(net::Client& client, const std::string& method, const std::string& target, int status,
                 const Json& body = nullptr, const std::map<std::string, std::string>& headers = {}) {
  auto response = client.request(method, target, body.is_null() ? "" : body.dump(), headers);
  if (!response) throw std::runtime_error(method + " " + target + ": " + response.error().to_string());
  if (response->status != status) {
    throw std::runtime_error(method + " " + target + ": expected " + std::to_string(status) + ", got " +
                             std::to_string(response->status) + ": " + response->body);
  }
  Json json = Json::parse(response->body, nullptr, false);
  return json.is_discarded() ? Json(response->body) : json;
}

// Polls `condition` until it holds or `timeout` passes.
template <typename F>
bool eventually(F condition, std::chrono::milliseconds timeout = std::chrono::milliseconds(10000)) {
  auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    if (condition()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return condition();
}

}  // namespace cnlab::server::test_support

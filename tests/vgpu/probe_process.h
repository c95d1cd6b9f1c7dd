// Runs the CUDA probe (probe.cpp) as a real process with libcnlab-vgpu.so preloaded, against the
// driver test double, in an environment the test chooses; reads what it prints line by line.
#pragma once

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace cnlab::vgpu::test {

using Env = std::map<std::string, std::string>;

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnlab_vgpu_test_XXXXXX").string();
    if (::mkdtemp(pattern.data()) == nullptr) std::abort();
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
  return text.str();
}

// One run of a probe. Its stdin is a pipe: scenarios that hold read it until it closes.
class Probe {
 public:
  Probe(const std::string& binary, const std::vector<std::string>& args, const Env& env) {
    int in[2], out[2];
    if (::pipe(in) != 0 || ::pipe(out) != 0) std::abort();
    pid_ = ::fork();
    if (pid_ == 0) {
      ::dup2(in[0], 0);
      ::dup2(out[1], 1);
      ::close(in[0]);
      ::close(in[1]);
      ::close(out[0]);
      ::close(out[1]);
      for (const auto& [k, v] : env) ::setenv(k.c_str(), v.c_str(), 1);
      std::vector<std::string> argv = {binary};
      argv.insert(argv.end(), args.begin(), args.end());
      std::vector<char*> raw;
      for (auto& a : argv) raw.push_back(a.data());
      raw.push_back(nullptr);
      ::execv(raw[0], raw.data());
      ::_exit(127);
    }
    ::close(in[0]);
    ::close(out[1]);
    stdin_ = in[1];
    stdout_ = out[0];
  }
  ~Probe() {
    if (stdin_ >= 0) ::close(stdin_);
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
    if (stdout_ >= 0) ::close(stdout_);
  }
  Probe(const Probe&) = delete;
  Probe& operator=(const Probe&) = delete;

  // Reads until a line starting with `key` arrives (returns it), or the process ends / time runs out.
  std::optional<std::string> wait_for(const std::string& key, std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
    auto deadline = std::chrono::steady_clock::now() + timeout;
    for (;;) {
      for (size_t at; (at = buffer_.find('\n')) != std::string::npos;) {
        std::string line = buffer_.substr(0, at);
        buffer_.erase(0, at + 1);
        lines_.push_back(line);
        if (line.rfind(key, 0) == 0) return line;
      }
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) return std::nullopt;
      pollfd p{stdout_, POLLIN, 0};
      if (::poll(&p, 1, static_cast<int>(left.count())) <= 0) return std::nullopt;
      char chunk[4096];
      ssize_t n = ::read(stdout_, chunk, sizeof chunk);
      if (n <= 0) return std::nullopt;
      buffer_.append(chunk, static_cast<size_t>(n));
    }
  }
  void send_line(const std::string& line) { (void)!::write(stdin_, (line + "\n").data(), line.size() + 1); }
  // Closes stdin (a holding scenario then exits) and waits for the exit code (-signal if killed).
  int finish(std::chrono::milliseconds timeout = std::chrono::seconds(30)) {
    if (stdin_ >= 0) ::close(stdin_);
    stdin_ = -1;
    while (wait_for("\x01", std::chrono::milliseconds(50))) {
    }
    auto deadline = std::chrono::steady_clock::now() + timeout;
    int status = 0;
    while (::waitpid(pid_, &status, WNOHANG) == 0) {
      wait_for("\x01", std::chrono::milliseconds(20));
      if (std::chrono::steady_clock::now() > deadline) {
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, &status, 0);
        break;
      }
    }
    wait_for("\x01", std::chrono::milliseconds(50));
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
  }
  void kill(int signal) { ::kill(pid_, signal); }
  pid_t pid() const { return pid_; }
  // Every line read so far.
  const std::vector<std::string>& lines() const { return lines_; }
  std::string output() const {
    std::string all;
    for (const auto& l : lines_) all += l + "\n";
    return all;
  }

 private:
  pid_t pid_ = -1;
  int stdin_ = -1, stdout_ = -1;
  std::string buffer_;
  std::vector<std::string> lines_;
};

// The number after `key` in a line like "held_info 0 free 123 total 456".
inline long long field(const std::string& line, const std::string& key) {
  std::istringstream in(line);
  std::string word;
  while (in >> word) {
    if (word == key) {
      long long v = 0;
      in >> v;
      return v;
    }
  }
  return -1;
}

}  // namespace cnlab::vgpu::test

// Starts the real `cnlab agent` as a node of a test cluster: simulated GPUs, its own data
// directory, metrics on a free loopback port, short heartbeats and stop grace so that tests run fast.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include "server_process.h"

namespace cnlab::server::test_support {

class AgentProcess {
 public:
  struct Options {
    std::string name;
    std::string gpus = "h100x2";
    std::string run_as;  // "" runs jobs as the test's own user
    std::vector<std::string> extra;
  };

  AgentProcess(const ServerProcess& server, std::string join_token, std::string data_dir, Options options)
      : server_url_(server.url()),
        ca_(server.ca()),
        join_token_(std::move(join_token)),
        data_dir_(std::move(data_dir)),
        options_(std::move(options)) {
    start();
  }
  ~AgentProcess() { stop(SIGTERM); }

  void start() {
    std::vector<std::string> args = {CNLAB_BINARY,     "agent",          "--server",         server_url_,
                                     "--ca",           ca_,              "--join-token",     join_token_,
                                     "--data-dir",     data_dir_,        "--name",           options_.name,
                                     "--simulate-gpus", options_.gpus,   "--metrics-listen", "127.0.0.1:0",
                                     "--heartbeat-interval", "1s",       "--stop-grace",     "1s"};
    if (!options_.run_as.empty()) {
      args.push_back("--run-as");
      args.push_back(options_.run_as);
    }
    for (const auto& e : options_.extra) args.push_back(e);
    std::string line;
    std::tie(pid_, line) = spawn_cnlab(args, data_dir_ + ".log");
    if (line.rfind("agent ", 0) != 0) {
      stop(SIGKILL);
      throw std::runtime_error("agent did not start: \"" + line + "\"; log: " + slurp(data_dir_ + ".log"));
    }
    auto at = line.find("metrics on ");
    metrics_url_ = at == std::string::npos ? "" : line.substr(at + 11);
  }

  // SIGTERM: a clean stop (jobs keep running); SIGKILL: the agent dies (jobs keep running too).
  // An agent that has not stopped within a minute fails the test and is killed, so that a stop
  // which hangs fails instead of holding the test run.
  void stop(int signal) {
    if (pid_ <= 0) return;
    ::kill(pid_, signal);
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::minutes(1);
    while (::waitpid(pid_, nullptr, WNOHANG) == 0) {
      if (std::chrono::steady_clock::now() >= deadline) {
        ADD_FAILURE() << "agent " << options_.name << " did not stop within a minute of signal " << signal;
        ::kill(pid_, SIGKILL);
        ::waitpid(pid_, nullptr, 0);
        break;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    pid_ = -1;
  }

  // A signal to the running agent, which goes on (SIGSTOP: it stops answering until SIGCONT).
  void signal(int sig) {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  const std::string& name() const { return options_.name; }
  const std::string& data_dir() const { return data_dir_; }
  const std::string& metrics_url() const { return metrics_url_; }
  std::string log() const { return slurp(data_dir_ + ".log"); }

 private:
  std::string server_url_, ca_, join_token_, data_dir_;
  Options options_;
  std::string metrics_url_;
  pid_t pid_ = -1;
};

}  // namespace cnlab::server::test_support

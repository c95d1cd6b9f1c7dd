// Starts the real `cnlab dev` (server and agent in one process) with its own HOME, so the CLI
// config it writes lands in a test directory, and reads back what it printed.
#pragma once

#include <signal.h>
#include <sys/wait.h>

#include <string>
#include <vector>

#include "server_process.h"

namespace cnlab::server::test_support {

class DevProcess {
 public:
  // `home` receives .config/cnlab/config; `data_dir` the cluster's state.
  DevProcess(std::string home, std::string data_dir, std::vector<std::string> extra = {})
      : home_(std::move(home)), data_dir_(std::move(data_dir)), extra_(std::move(extra)) {
    start();
  }
  ~DevProcess() { stop(SIGINT); }

  void start() {
    std::vector<std::string> args = {"/usr/bin/env", "-u", "XDG_CONFIG_HOME", "-u", "XDG_DATA_HOME",
                                     "-u", "CNLAB_SERVER", "-u", "CNLAB_TOKEN", "-u", "CNLAB_CA",
                                     "HOME=" + home_, CNLAB_BINARY, "dev", "--data-dir", data_dir_,
                                     "--listen", "127.0.0.1:0", "--metrics-listen", "", "--stop-grace", "1s"};
    for (const auto& e : extra_) args.push_back(e);
    // Up to the line that tells the user what to try, the last of the start-up lines.
    std::tie(pid_, banner_) = spawn_cnlab(args, log(), "try: ");
    const std::string prefix = "listening on ";
    if (banner_.rfind(prefix, 0) != 0) {
      stop(SIGKILL);
      throw std::runtime_error("cnlab dev did not start: \"" + banner_ + "\"; log: " + slurp(log()));
    }
    url_ = banner_.substr(prefix.size(), banner_.find('\n') - prefix.size());
  }

  // SIGINT (Ctrl-C) for a clean stop; returns the exit status (-1 when killed by a signal).
  int stop(int signal) {
    if (pid_ <= 0) return -1;
    ::kill(pid_, signal);
    int status = 0;
    ::waitpid(pid_, &status, 0);
    pid_ = -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  const std::string& url() const { return url_; }
  const std::string& banner() const { return banner_; }  // what it printed on starting
  std::string log() const { return data_dir_ + ".log"; }
  std::string config_file() const { return home_ + "/.config/cnlab/config"; }

 private:
  std::string home_, data_dir_;
  std::vector<std::string> extra_;
  pid_t pid_ = -1;
  std::string url_;
  std::string banner_;
};

}  // namespace cnlab::server::test_support

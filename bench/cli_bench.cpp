// The researcher's path, timed (results: docs/benchmarks/cli.md). A real `cnlab dev` on simulated
// GPUs, and the real `cnlab` binary run as a user would run it:
//   1. Enter to first output line: `cnlab run job.py --gpu h100-25` from fork to the job's first
//      line on cnlab's stdout (packing and uploading the workspace, submitting, scheduling,
//      starting python3, streaming), on an idle cluster. Goal p50 < 1 s.
//   2. `cnlab ps` with 10,000 jobs: the whole command, process start to exit. Goal < 200 ms.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <thread>

#include "report.h"
#include "server_cluster.h"

namespace cnlab::bench {
namespace {

using namespace std::chrono_literals;

struct Child {
  pid_t pid = -1;
  int out = -1;  // its stdout
};

// `cnlab ARGS` with HOME set (the config `cnlab dev` wrote), in `cwd`, stdout piped back, stderr to
// /dev/null.
Child start_cnlab(const std::string& home, const std::string& cwd, std::vector<std::string> args) {
  int pipe_fds[2];
  if (::pipe(pipe_fds) != 0) std::abort();
  pid_t pid = ::fork();
  if (pid == 0) {
    ::dup2(pipe_fds[1], 1);
    ::close(pipe_fds[0]);
    ::close(pipe_fds[1]);
    int null = ::open("/dev/null", O_WRONLY);
    ::dup2(null, 2);
    if (::chdir(cwd.c_str()) != 0) ::_exit(126);
    ::setenv("HOME", home.c_str(), 1);
    ::unsetenv("XDG_CONFIG_HOME");
    args.insert(args.begin(), CNLAB_BINARY);
    std::vector<char*> argv;
    for (auto& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    ::execv(argv[0], argv.data());
    ::_exit(127);
  }
  ::close(pipe_fds[1]);
  return {pid, pipe_fds[0]};
}

int finish(Child& child) {
  char buffer[65536];
  while (::read(child.out, buffer, sizeof(buffer)) > 0) {
  }
  ::close(child.out);
  int status = 0;
  ::waitpid(child.pid, &status, 0);
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

class DevCluster {
 public:
  explicit DevCluster(const TempDir& dir) : home_(dir.path() + "/home") {
    std::filesystem::create_directories(home_);
    std::string line;
    std::tie(pid_, line) = spawn_first_line({"/usr/bin/env", "HOME=" + home_, CNLAB_BINARY, "dev", "--data-dir",
                                             dir.path() + "/data", "--listen", "127.0.0.1:0", "--metrics-listen", ""},
                                            dir.path() + "/dev.log");
    if (line.rfind("listening on ", 0) != 0) {
      std::fprintf(stderr, "cli_bench: cnlab dev did not start: \"%s\" (log %s/dev.log)\n", line.c_str(), dir.path().c_str());
      std::exit(1);
    }
    Json config = Json::parse(std::ifstream(home_ + "/.config/cnlab/config"));
    auto client = net::Client::connect({config["server"], config["ca"], config["token"]});
    if (!client) std::exit(1);
    admin_ = std::move(*client);
  }
  ~DevCluster() {
    ::kill(pid_, SIGINT);
    ::waitpid(pid_, nullptr, 0);
  }
  const std::string& home() const { return home_; }
  net::Client& admin() { return *admin_; }

 private:
  std::string home_;
  pid_t pid_ = -1;
  std::unique_ptr<net::Client> admin_;
};

int enter_to_first_line(int runs) {
  TempDir dir("cnlab_cli_bench");
  DevCluster dev(dir);
  const std::string work = dir.path() + "/work";
  std::filesystem::create_directories(work);
  std::ofstream(work + "/job.py") << "import sys\nprint('first line', flush=True)\n";
  std::vector<double> first_line_ms, total_ms;
  int failures = 0;
  for (int i = 0; i <= runs; ++i) {  // run 0 uploads the workspace; it is not counted
    auto started = Clock::now();
    Child child = start_cnlab(dev.home(), work, {"run", "job.py", "--gpu", "h100-25"});
    std::string seen;
    double first = -1;
    char c;
    while (first < 0 && ::read(child.out, &c, 1) == 1) {
      seen += c;
      if (seen.find("first line\n") != std::string::npos) first = ms(seconds_since(started));
    }
    int status = finish(child);
    if (status != 0 || first < 0) ++failures;
    if (i == 0) continue;
    first_line_ms.push_back(first);
    total_ms.push_back(ms(seconds_since(started)));
  }
  Percentiles f = percentiles(first_line_ms), t = percentiles(total_ms);
  std::printf("1. enter to first output line, `cnlab run job.py --gpu h100-25` (%d runs, workspace cached): "
              "p50 %.0f ms, p90 %.0f ms, max %.0f ms; whole command p50 %.0f ms; failed runs: %d\n",
              runs, f.p50, f.p90, f.max, t.p50, failures);
  std::printf("   goal p50 < 1000 ms: %s\n", f.p50 < 1000 && failures == 0 ? "met" : "NOT met");
  return f.p50 < 1000 && failures == 0 ? 0 : 1;
}

int ps_with_many_jobs(int jobs, int runs) {
  TempDir dir("cnlab_cli_bench");
  DevCluster dev(dir);
  // One job holds both GPUs; the rest wait behind it, so the list holds `jobs` jobs of every age.
  Json holder = {{"spec", {{"project", "default"}, {"gpu", "h100x2"}, {"command", {"sleep", "3600"}}}}};
  if (!call(dev.admin(), "POST", "/v1/jobs", 201, holder)) return 1;
  auto started = Clock::now();
  for (int i = 1; i < jobs; ++i) {
    Json body = {{"metadata", {{"name", "wait"}}},
                 {"spec", {{"project", "default"}, {"gpu", "h100x2"}, {"command", {"python3", "train.py"}}}}};
    if (auto made = call(dev.admin(), "POST", "/v1/jobs", 201, body); !made) {
      std::fprintf(stderr, "cli_bench: submit %d: %s\n", i, made.error().to_string().c_str());
      return 1;
    }
  }
  std::printf("2. submitted %d jobs in %.1f s\n", jobs, seconds_since(started));
  for (const char* format : {"table", "json"}) {
    std::vector<double> times;
    size_t bytes = 0;
    for (int i = 0; i < runs; ++i) {
      auto began = Clock::now();
      Child child = start_cnlab(dev.home(), dir.path(), {"ps", "-o", format});
      char buffer[65536];
      ssize_t n;
      bytes = 0;
      while ((n = ::read(child.out, buffer, sizeof(buffer))) > 0) bytes += static_cast<size_t>(n);
      ::close(child.out);
      child.out = -1;
      int status = 0;
      ::waitpid(child.pid, &status, 0);
      times.push_back(ms(seconds_since(began)));
      if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
        std::fprintf(stderr, "cli_bench: cnlab ps -o %s failed\n", format);
        return 1;
      }
    }
    Percentiles p = percentiles(times);
    std::printf("   `cnlab ps -o %s` with %d jobs (%zu bytes out, %d runs): p50 %.0f ms, max %.0f ms; goal < 200 ms: %s\n",
                format, jobs, bytes, runs, p.p50, p.max, p.p50 < 200 ? "met" : "NOT met");
  }
  return 0;
}

}  // namespace
}  // namespace cnlab::bench

int main(int argc, char** argv) {
  using namespace cnlab::bench;
  CLI::App app{"CNLab command-line benchmarks (docs/benchmarks/cli.md)"};
  bool all = false, first = false, ps = false;
  int runs = 20, jobs = 10000, ps_runs = 10;
  app.add_flag("--all", all, "Both benchmarks");
  app.add_flag("--first-line", first, "1. Enter to the job's first output line");
  app.add_flag("--ps", ps, "2. `cnlab ps` with many jobs");
  app.add_option("--runs", runs, "--first-line: runs measured")->capture_default_str();
  app.add_option("--jobs", jobs, "--ps: jobs in the cluster")->capture_default_str();
  app.add_option("--ps-runs", ps_runs, "--ps: runs of each format")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  if (!(all || first || ps)) {
    std::fprintf(stderr, "cli_bench: choose --all, --first-line or --ps (see --help)\n");
    return 2;
  }
  print_machine_line();
  int status = 0;
  if (all || first) status |= enter_to_first_line(runs);
  if (all || ps) status |= ps_with_many_jobs(jobs, ps_runs);
  return status;
}

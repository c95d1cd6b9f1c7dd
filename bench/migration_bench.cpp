// Checkpoint and migration pauses (results: docs/benchmarks/migration.md), on this machine's CRIU
// with real processes: a Python process holding N MiB of resident memory (every page touched).
//
//  stop-and-copy  CNLab's path (JobHandle::checkpoint kStop, then a restore under a new shim): the
//                 job is frozen from the dump's start until the restored copy runs. Local disk;
//                 a migration adds packing, upload and download of the images.
//  periodic       JobHandle::checkpoint kLeaveStopped then thaw: how long a periodic checkpoint
//                 freezes the job, per GiB, and the bytes stored.
//  post-copy      CRIU's lazy pages (dump --lazy-pages with its page server, `criu lazy-pages`,
//                 restore --lazy-pages), run with criu directly: the reference for the path the
//                 agents do not take yet. Pause = dump start to the restored process running;
//                 total = until the last page has arrived.
//
// Needs root and a working CRIU. `migration_bench --sizes 256,1024,4096`.
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "agent/runtime/runtime.h"
#include "common/strings.h"

namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using Clock = std::chrono::steady_clock;
using cnlab::agent::JobHandle;

double ms_since(Clock::time_point start) {
  return std::chrono::duration<double, std::milli>(Clock::now() - start).count();
}

// Fills `mib` MiB with random bytes (as incompressible as a model's weights), says "ready", ticks.
std::string holder_script(int64_t mib) {
  return fmt::format(
      "import os, sys, time\n"
      "b = bytearray({} << 20)\n"
      "for off in range(0, len(b), 1 << 24): b[off:off + (1 << 24)] = os.urandom(min(1 << 24, len(b) - off))\n"
      "print('ready', flush=True)\n"
      "while True: time.sleep(0.05)\n",
      mib);
}

bool wait_for_line(const JobHandle& job, const std::string& text, std::chrono::seconds timeout) {
  auto reader = cnlab::agent::OutputReader::open(job.output_path());
  if (!reader) return false;
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    auto lines = reader->read();
    if (!lines) return false;
    for (const auto& line : *lines) {
      if (line.text == text) return true;
    }
    reader->wait(50ms);
  }
  return false;
}

cnlab::agent::ProcessSpec holder(const fs::path& root, const std::string& name, int64_t mib) {
  cnlab::agent::ProcessSpec spec;
  spec.job_id = "bench/" + name;
  spec.argv = {"/usr/bin/python3", "-u", "-c", holder_script(mib)};
  spec.env = {"PATH=/usr/local/bin:/usr/bin:/bin"};
  spec.job_dir = root / name;
  return spec;
}

void stop_and_copy(cnlab::agent::Runtime& runtime, const fs::path& root, int64_t mib) {
  auto job = runtime.start(holder(root, fmt::format("sc-{}", mib), mib));
  if (!job || !wait_for_line(*job, "ready", 300s)) {
    std::printf("| stop-and-copy | %lld MiB | did not start |\n", static_cast<long long>(mib));
    return;
  }
  const fs::path images = root / fmt::format("sc-{}-images", mib);
  const auto frozen = Clock::now();
  auto taken = job->checkpoint(images, JobHandle::AfterDump::kStop);
  const double dump_ms = ms_since(frozen);
  if (!taken) {
    std::printf("| stop-and-copy | %lld MiB | dump failed: %s |\n", static_cast<long long>(mib),
                taken.error().to_string().c_str());
    return;
  }
  (void)job->wait(10s);
  auto spec = holder(root, fmt::format("sc-{}-restored", mib), mib);
  spec.restore_from = images;
  const auto restoring = Clock::now();
  auto restored = runtime.start(spec);
  const double restore_ms = ms_since(restoring);
  std::printf("| stop-and-copy | %lld MiB | %.0f ms | dump %.0f + restore %.0f | %.0f MiB images |%s\n",
              static_cast<long long>(mib), ms_since(frozen), dump_ms, restore_ms,
              static_cast<double>(taken->bytes) / (1 << 20), restored ? "" : " restore failed");
  if (restored) (void)restored->stop(1s);
  std::error_code ec;
  fs::remove_all(images, ec);
}

void periodic(cnlab::agent::Runtime& runtime, const fs::path& root, int64_t mib) {
  auto job = runtime.start(holder(root, fmt::format("p-{}", mib), mib));
  if (!job || !wait_for_line(*job, "ready", 300s)) return;
  const fs::path images = root / fmt::format("p-{}-images", mib);
  auto taken = job->checkpoint(images, JobHandle::AfterDump::kLeaveStopped);
  (void)job->thaw();
  if (taken) {
    const double gib = static_cast<double>(mib) / 1024;
    std::printf("| periodic (frozen, then thawed) | %lld MiB | %lld ms | %.0f ms per GiB | %.0f MiB stored |\n",
                static_cast<long long>(mib), static_cast<long long>(taken->pause.count()),
                static_cast<double>(taken->pause.count()) / gib, static_cast<double>(taken->bytes) / (1 << 20));
  } else {
    std::printf("| periodic | %lld MiB | failed: %s |\n", static_cast<long long>(mib), taken.error().to_string().c_str());
  }
  (void)job->stop(1s);
  std::error_code ec;
  fs::remove_all(images, ec);
}

pid_t spawn(const std::vector<std::string>& args) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setenv("CRIU_FAULT", "130", 1);
    const int null_fd = ::open("/dev/null", O_RDWR);
    for (int fd : {0, 1, 2}) ::dup2(null_fd, fd);
    std::vector<char*> argv;
    for (const auto& a : args) argv.push_back(const_cast<char*>(a.c_str()));
    argv.push_back(nullptr);
    ::execvp(argv[0], argv.data());
    ::_exit(127);
  }
  return pid;
}

void post_copy(const std::string& criu, const fs::path& root, int64_t mib) {
  const fs::path images = root / fmt::format("pc-{}-images", mib), ready = root / "pc-ready";
  fs::create_directories(images);
  std::error_code ec;
  fs::remove(ready, ec);
  // The process in its own PID namespace and session, as the agent runs jobs.
  std::string with_ready = holder_script(mib);
  const std::string say_ready = "print('ready', flush=True)";
  with_ready.replace(with_ready.find(say_ready), say_ready.size(), "open('" + ready.string() + "', 'w').close()");
  const pid_t holder_pid = spawn({"unshare", "--pid", "--fork", "setsid", "/usr/bin/python3", "-c", with_ready});
  const auto deadline = Clock::now() + 300s;
  while (!fs::exists(ready, ec) && Clock::now() < deadline) std::this_thread::sleep_for(20ms);
  std::string root_pid;
  {
    // unshare's child, the namespace's PID 1: the python process.
    std::ifstream children(fmt::format("/proc/{}/task/{}/children", holder_pid, holder_pid));
    children >> root_pid;
  }
  if (root_pid.empty()) {
    std::printf("| post-copy (CRIU lazy pages) | %lld MiB | did not start |\n", static_cast<long long>(mib));
    return;
  }
  // A port of its own per run: the previous run's page server may still hold its port.
  static int runs = 0;
  const std::string port = std::to_string(27000 + (::getpid() % 500) * 8 + runs++ % 8);
  const auto frozen = Clock::now();
  const pid_t dump = spawn({criu, "dump", "--tree", root_pid, "--images-dir", images.string(), "--log-file", "dump.log",
                            "--lazy-pages", "--address", "127.0.0.1", "--port", port});
  // The dump has written everything but the lazy memory once its inventory is there.
  while (!fs::exists(images / "inventory.img", ec) && Clock::now() < deadline) std::this_thread::sleep_for(2ms);
  const pid_t lazy = spawn({criu, "lazy-pages", "--page-server", "--address", "127.0.0.1", "--port", port,
                            "--images-dir", images.string(), "--log-file", "lazy.log"});
  std::this_thread::sleep_for(20ms);  // the daemon's socket
  const pid_t restore = spawn({criu, "restore", "--images-dir", images.string(), "--log-file", "restore.log",
                               "--lazy-pages", "--restore-detached", "--pidfile", (root / fmt::format("pc-{}.pid", mib)).string()});
  int status = 0;
  ::waitpid(restore, &status, 0);
  const double pause_ms = ms_since(frozen);
  ::waitpid(dump, nullptr, 0);  // serves pages until the target has them all
  const double total_ms = ms_since(frozen);
  ::kill(lazy, SIGKILL);
  ::waitpid(lazy, nullptr, 0);
  std::string restored_pid;
  std::ifstream(root / fmt::format("pc-{}.pid", mib)) >> restored_pid;
  const bool restored = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  std::printf("| post-copy (CRIU lazy pages) | %lld MiB | %.0f ms | all pages after %.0f ms |%s\n",
              static_cast<long long>(mib), pause_ms, total_ms,
              restored ? "" : (" restore failed: " + (images / "restore.log").string() + " kept").c_str());
  if (!restored_pid.empty()) ::kill(std::stoi(restored_pid), SIGKILL);
  ::kill(holder_pid, SIGKILL);
  ::waitpid(holder_pid, nullptr, 0);
  if (restored) fs::remove_all(images, ec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CNLab checkpoint and migration pauses (docs/benchmarks/migration.md)"};
  std::string sizes = "256,1024,4096", shim;
  bool skip_post_copy = false;
  app.add_option("--sizes", sizes, "Resident memory of the process, MiB, comma-separated")->capture_default_str();
  app.add_option("--shim", shim, "The shim executable (default: cnlab-shim beside this binary's directory)");
  app.add_flag("--no-post-copy", skip_post_copy, "Skip CRIU's lazy-pages reference");
  CLI11_PARSE(app, argc, argv);
  if (::geteuid() != 0) {
    std::fprintf(stderr, "migration_bench: CRIU needs root\n");
    return 2;
  }
  const std::string criu = cnlab::agent::find_criu();
  if (criu.empty()) {
    std::fprintf(stderr, "migration_bench: no criu (scripts/install-criu.sh)\n");
    return 2;
  }
  if (shim.empty()) shim = (fs::canonical("/proc/self/exe").parent_path().parent_path() / "cnlab-shim").string();
  cnlab::agent::RuntimeOptions options;
  options.shim_command = {shim};
  options.criu = criu;
  options.cgroup_parent = "cnlab-bench";
  options.checkpoint_timeout = 600s;
  options.start_timeout = 30s;
  auto runtime = cnlab::agent::Runtime::create(options);
  if (!runtime || !(*runtime)->capabilities().checkpoint) {
    std::fprintf(stderr, "migration_bench: no transparent checkpoints here: %s\n",
                 runtime ? (*runtime)->capabilities().checkpoint_reason.c_str() : runtime.error().to_string().c_str());
    return 2;
  }
  // Lazy pages move memory through pipes of up to 4 MiB.
  std::ofstream("/proc/sys/fs/pipe-max-size") << (8 << 20);
  char dir_template[] = "/tmp/cnlab-migration-bench-XXXXXX";
  const fs::path root = ::mkdtemp(dir_template);
  std::printf("machine: %u hardware threads; criu %s; images on %s\n\n", std::thread::hardware_concurrency(),
              criu.c_str(), root.c_str());
  std::printf("| path | resident | pause | detail | stored |\n|---|---|---|---|---|\n");
  std::fflush(stdout);
  for (auto part : cnlab::split(sizes, ',')) {
    auto mib = cnlab::parse_int(part, "--sizes");
    if (!mib || *mib <= 0) {
      std::fprintf(stderr, "migration_bench: --sizes \"%s\": MiB expected\n", std::string(part).c_str());
      return 2;
    }
    stop_and_copy(**runtime, root, *mib);
    periodic(**runtime, root, *mib);
    if (!skip_post_copy) post_copy(criu, root, *mib);
    std::fflush(stdout);
  }
  (void)(*runtime)->remove_cgroup_parent();
  std::error_code ec;
  bool kept = false;
  for (const auto& entry : fs::directory_iterator(root, ec)) kept |= entry.path().filename().string().rfind("pc-", 0) == 0;
  if (!kept) fs::remove_all(root, ec);
  return 0;
}

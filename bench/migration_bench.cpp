// Checkpoint and migration pauses (results: docs/benchmarks/migration.md), on this machine's CRIU
// with real processes: a Python process holding N MiB of resident memory (every page touched).
//
//  stop-and-copy  CNLab's path (JobHandle::checkpoint kStop, then a restore under a new shim): the
//                 job is frozen from the dump's start until the restored copy runs. Local disk;
//                 a migration adds packing, upload and download of the images.
//  periodic       JobHandle::checkpoint kLeaveStopped then thaw: how long a periodic checkpoint
//                 freezes the job, per GiB, and the bytes stored.
//  post-copy      CNLab's post-copy path (`cnlab agent --post-copy`): JobHandle::checkpoint_lazy
//                 (CRIU writes all but the memory and serves the pages from its page server), the
//                 images copied (the agents upload and download them), then a restore under a new
//                 shim with ProcessSpec::pages_from (`criu lazy-pages` pulls the memory while the
//                 job runs). Pause = dump start to the restored process running; total = until the
//                 last page has arrived.
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

void post_copy(cnlab::agent::Runtime& runtime, const fs::path& root, int64_t mib) {
  auto job = runtime.start(holder(root, fmt::format("pc-{}", mib), mib));
  if (!job || !wait_for_line(*job, "ready", 300s)) {
    std::printf("| post-copy | %lld MiB | did not start |\n", static_cast<long long>(mib));
    return;
  }
  const fs::path images = root / fmt::format("pc-{}-images", mib), shipped = root / fmt::format("pc-{}-shipped", mib);
  auto port = cnlab::agent::free_tcp_port("127.0.0.1");
  const auto frozen = Clock::now();
  auto dump = port ? job->checkpoint_lazy(images, "127.0.0.1", *port)
                   : cnlab::Result<std::unique_ptr<JobHandle::LazyDump>>(port.error());
  if (!dump) {
    std::printf("| post-copy | %lld MiB | dump failed: %s |\n", static_cast<long long>(mib), dump.error().to_string().c_str());
    (void)job->stop(1s);
    return;
  }
  const double dump_ms = ms_since(frozen);
  // What the agent uploads and the target downloads: the images, all but the memory.
  std::error_code ec;
  fs::copy(images, shipped, fs::copy_options::recursive, ec);
  auto spec = holder(root, fmt::format("pc-{}-restored", mib), mib);
  spec.restore_from = shipped;
  spec.pages_from = cnlab::format_host_port((*dump)->page_server());
  const auto restoring = Clock::now();
  auto restored = runtime.start(spec);
  const double restore_ms = ms_since(restoring), pause_ms = ms_since(frozen);
  auto served = restored ? (*dump)->wait_served(600s) : cnlab::Status(restored.error());
  const double total_ms = ms_since(frozen);
  std::printf("| post-copy (CNLab's) | %lld MiB | %.0f ms | dump %.0f + restore %.0f; all pages after %.0f ms | %.1f MiB "
              "images |%s\n",
              static_cast<long long>(mib), pause_ms, dump_ms, restore_ms, total_ms,
              static_cast<double>((*dump)->taken().bytes) / (1 << 20),
              served ? "" : (" failed: " + served.error().to_string()).c_str());
  if (restored) (void)restored->stop(1s);
  (void)job->stop(1s);
  fs::remove_all(images, ec);
  fs::remove_all(shipped, ec);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"CNLab checkpoint and migration pauses (docs/benchmarks/migration.md)"};
  std::string sizes = "256,1024,4096", shim;
  bool skip_post_copy = false;
  app.add_option("--sizes", sizes, "Resident memory of the process, MiB, comma-separated")->capture_default_str();
  app.add_option("--shim", shim, "The shim executable (default: cnlab-shim beside this binary's directory)");
  app.add_flag("--no-post-copy", skip_post_copy, "Skip the post-copy rows");
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
  if (auto enabled = cnlab::agent::enable_post_copy(); !enabled && !skip_post_copy) {
    std::fprintf(stderr, "migration_bench: %s\n", enabled.error().to_string().c_str());
    return 2;
  }
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
    if (!skip_post_copy) post_copy(**runtime, root, *mib);
    std::fflush(stdout);
  }
  (void)(*runtime)->remove_cgroup_parent();
  std::error_code ec;
  fs::remove_all(root, ec);
  return 0;
}

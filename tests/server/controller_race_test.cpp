// Two scheduling controllers on one store: the one that decided on an outdated view loses its
// compare-and-swap and re-reads; no GPU block is ever booked twice.
#include <gtest/gtest.h>

#include <thread>

#include "server/scheduler_loop.h"
#include "server_process.h"

namespace cnlab::server {
namespace {

using test_support::TempDir;

Time t0() { return *parse_rfc3339("2026-12-01T10:00:00Z", "t"); }

void seed(store::Store& store, int nodes, int jobs) {
  std::vector<store::Op> ops;
  for (int n = 0; n < nodes; ++n) {
    model::Node node;
    node.meta.name = "gpu-" + std::to_string(n);
    node.cpu_milli = 64000;
    node.memory_mib = 512 * 1024;
    node.last_heartbeat = t0();
    for (int g = 0; g < 4; ++g) node.gpus.push_back({.index = g, .uuid = "u", .model = *model::find_model("h100"), .memory_mib = 81920});
    ops.push_back(store::Op::create(kind::kNodes, node.meta.name, to_json(node).dump()));
  }
  for (int j = 0; j < jobs; ++j) {
    model::Job job;
    job.meta.name = "job-" + std::to_string(j);
    job.spec.project = "default";
    job.spec.user = "alice";
    job.spec.gpu = *model::parse_slice(j % 3 == 0 ? "h100" : "h100-30");
    job.spec.command = {"true"};
    job.status.submitted_at = t0();
    ops.push_back(store::Op::create(kind::kJobs, job.meta.name, to_json(job).dump()));
  }
  ASSERT_TRUE(store.txn(std::move(ops)));
}

// Sums every job's bound blocks per GPU from the store and checks them against 100, and that the
// allocation records say the same as the jobs.
void expect_no_double_booking(store::Store& store) {
  auto jobs = store.list(kind::kJobs, {});
  ASSERT_TRUE(jobs);
  std::map<std::pair<std::string, int>, int> blocks;
  std::map<std::string, std::map<std::string, int>> by_node;  // node -> job -> blocks
  for (const auto& record : jobs->items) {
    auto job = model::job_from_json(Json::parse(record.value));
    ASSERT_TRUE(job);
    if (job->status.phase != model::JobPhase::kScheduled && job->status.phase != model::JobPhase::kRunning) continue;
    for (const auto& b : job->status.placement) {
      for (const auto& g : b.gpus) {
        blocks[{b.node, g.index}] += g.blocks;
        by_node[b.node][job->meta.name] += g.blocks;
      }
    }
  }
  for (const auto& [gpu, used] : blocks) EXPECT_LE(used, 100) << gpu.first << " GPU " << gpu.second << " booked twice";
  auto allocations = store.list(kind::kAllocations, {});
  ASSERT_TRUE(allocations);
  std::map<std::string, std::map<std::string, int>> recorded;
  for (const auto& record : allocations->items) {
    auto a = allocation_from_json(Json::parse(record.value));
    ASSERT_TRUE(a);
    for (const auto& [job, gpus] : a->jobs) {
      for (const auto& g : gpus) recorded[record.key][job] += g.blocks;
    }
  }
  std::erase_if(recorded, [](const auto& kv) { return kv.second.empty(); });
  EXPECT_EQ(recorded, by_node);
}

struct Controller {
  Controller(store::Store& store, const ServerConfig& config)
      : cache(store), loop(store, cache, metrics, config, [] { return t0(); }) {
    loop.attach();
    EXPECT_TRUE(cache.start());
  }
  Metrics metrics;
  ObjectCache cache;
  SchedulerLoop loop;
};

TEST(ControllerRace, TheControllerThatDecidedOnAStaleViewLosesAndNothingIsBookedTwice) {
  TempDir dir;
  auto store = store::open_sqlite_store({.path = dir.path() + "/store.db"});
  ASSERT_TRUE(store);
  seed(**store, 2, 20);
  ServerConfig config;
  Controller a(**store, config);
  Controller b(**store, config);
  b.cache.stop();  // b keeps the view it loaded: every decision it makes is on an outdated view
  CycleReport first = a.loop.run_once();
  EXPECT_GT(first.placed, 0u);
  EXPECT_EQ(first.conflicts, 0u);
  CycleReport stale = b.loop.run_once();
  EXPECT_GT(stale.placed, 0u);
  EXPECT_GT(stale.conflicts, 0u);
  expect_no_double_booking(**store);
}

TEST(ControllerRace, ConcurrentControllersNeverDoubleBook) {
  TempDir dir;
  auto store = store::open_sqlite_store({.path = dir.path() + "/store.db"});
  ASSERT_TRUE(store);
  seed(**store, 4, 120);
  ServerConfig config;
  Controller a(**store, config);
  Controller b(**store, config);
  size_t conflicts = 0, placed = 0;
  for (int round = 0; round < 10; ++round) {
    CycleReport ra, rb;
    std::thread ta([&] { ra = a.loop.run_once(); });
    std::thread tb([&] { rb = b.loop.run_once(); });
    ta.join();
    tb.join();
    conflicts += ra.conflicts + rb.conflicts;
    placed += ra.placed + rb.placed;
    expect_no_double_booking(**store);
  }
  EXPECT_GT(placed, 0u);
}

}  // namespace
}  // namespace cnlab::server

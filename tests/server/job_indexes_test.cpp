// The object cache's indexes of jobs, which what runs often reads instead of walking every job:
// - the jobs waiting for their nodes to release them (node reads, the node-lifecycle pass);
// - the jobs holding GPUs (Scheduled or Running) and those with a migration in flight (the
//   migration watch, idle reclaim, node drains, the room left on nodes);
// - the jobs bound to each node, finished ones included (a node's list and watch of its jobs).
// Each follows every write, a deletion and a cache started on an existing store; each entry is the
// job's current record; and each reader finds exactly the jobs it acts on, not the finished ones
// beside them. In process, on a real SQLite store.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "server/idle_reclaim.h"
#include "server/job_release.h"
#include "server/job_writes.h"
#include "server/metrics.h"
#include "server/migrations.h"
#include "server_process.h"

namespace cnlab::server {
namespace {

using namespace std::chrono_literals;
using test_support::TempDir;

Time t0() { return *parse_rfc3339("2026-12-01T10:00:00Z", "t"); }

model::Node node(const std::string& name) {
  model::Node n;
  n.meta.name = name;
  n.cpu_milli = 64000;
  n.memory_mib = 512 * 1024;
  n.last_heartbeat = t0();
  n.gpus.push_back({.index = 0, .uuid = "GPU-" + name, .memory_mib = 81920});
  return n;
}

model::Job job(const std::string& id) {
  model::Job j;
  j.meta.name = id;
  j.spec.project = "default";
  j.spec.user = "alice";
  j.spec.command = {"true"};
  j.status.submitted_at = t0();
  return j;
}

// A Pending job that waits for `nodes` to release it (none: it waits for nothing).
model::Job waiting(const std::string& id, std::vector<std::string> nodes) {
  model::Job j = job(id);
  if (!nodes.empty()) j.status.awaiting_release = model::PendingRelease{std::move(nodes), t0()};
  return j;
}

// A checkpointable production job asking `cpu` millicores, in `phase`; bound to 20 blocks of GPU 0
// of `on` unless it is Pending.
model::Job bound(const std::string& id, model::JobPhase phase, const std::string& on, int64_t cpu) {
  model::Job j = job(id);
  j.spec.priority_class = "production";
  j.spec.checkpointable = true;
  j.spec.cpu_milli = cpu;
  j.status.phase = phase;
  if (phase != model::JobPhase::kPending) j.status.placement = {{on, {{.index = 0, .blocks = 20, .vram_mib = 1024}}}};
  if (phase == model::JobPhase::kRunning || is_terminal(phase)) {
    j.status.started_at = t0();
    j.status.gpu_active_at = t0();
  }
  if (is_terminal(phase)) j.status.finished_at = t0() + 1min;
  return j;
}

// A SQLite store holding nodes gpu-1 and gpu-2 and the jobs a test starts from.
class StoreTest : public ::testing::Test {
 protected:
  void create(const std::vector<model::Job>& jobs) {
    auto opened = store::open_sqlite_store({.path = dir_.path() + "/store.db"});
    ASSERT_TRUE(opened);
    store_ = std::move(*opened);
    std::vector<store::Op> ops;
    for (const char* name : {"gpu-1", "gpu-2"}) ops.push_back(store::Op::create(kind::kNodes, name, to_json(node(name)).dump()));
    for (const auto& j : jobs) ops.push_back(store::Op::create(kind::kJobs, j.meta.name, to_json(j).dump()));
    ASSERT_TRUE(store_->txn(std::move(ops)));
  }

  // The ids in one of the cache's indexes; each entry must be the job's current cached record.
  static std::set<std::string> ids(const ObjectCache& cache, ObjectCache::JobsById ObjectCache::*index) {
    return cache.read([&](const ObjectCache& c) {
      std::set<std::string> out;
      for (const auto& [id, job] : c.*index) {
        EXPECT_EQ(job, c.jobs.get(id).object) << id << " is indexed with a record the cache no longer holds";
        out.insert(id);
      }
      return out;
    });
  }
  static std::shared_ptr<const model::Job> get(const ObjectCache& cache, const std::string& id) {
    return cache.read([&](const ObjectCache& c) { return c.jobs.get(id).object; });
  }

  TempDir dir_;
  std::unique_ptr<store::Store> store_;
};

class JobReleaseIndexTest : public StoreTest {
 protected:
  void SetUp() override { create({waiting("a", {"gpu-1"}), waiting("b", {"gpu-1", "gpu-2"}), waiting("c", {})}); }

  std::map<std::string, int64_t> owed(const ObjectCache& cache) {
    return cache.read([](const ObjectCache& c) { return releases_owed(c); });
  }
  std::set<std::string> indexed(const ObjectCache& cache) { return ids(cache, &ObjectCache::jobs_awaiting_release); }
};

TEST_F(JobReleaseIndexTest, FollowsEveryWriteAndADeletionAndIsRebuiltByACacheStartedLater) {
  ObjectCache cache(*store_);
  ASSERT_TRUE(cache.start());
  EXPECT_EQ(indexed(cache), (std::set<std::string>{"a", "b"}));
  EXPECT_EQ(owed(cache), (std::map<std::string, int64_t>{{"gpu-1", 2}, {"gpu-2", 1}}));

  // gpu-1 releases b: it still waits for gpu-2.
  auto changed = update_job(*store_, &cache, "b", [](model::Job& j) -> Result<bool> {
    return release_from(j, "gpu-1", t0() + std::chrono::seconds(3), "node gpu-1 stopped it");
  }, std::nullopt);
  ASSERT_TRUE(changed);
  EXPECT_EQ(owed(cache), (std::map<std::string, int64_t>{{"gpu-1", 1}, {"gpu-2", 1}}));
  // gpu-2 releases it too: b no longer waits, and is no longer indexed.
  changed = update_job(*store_, &cache, "b", [](model::Job& j) -> Result<bool> {
    return release_from(j, "gpu-2", t0() + std::chrono::seconds(4), "node gpu-2 stopped it");
  }, std::nullopt);
  ASSERT_TRUE(changed);
  EXPECT_EQ(indexed(cache), (std::set<std::string>{"a"}));
  EXPECT_EQ(owed(cache), (std::map<std::string, int64_t>{{"gpu-1", 1}}));
  // Its Released event says how each node of the gang let it go, in order.
  auto b = get(cache, "b");
  ASSERT_TRUE(b);
  ASSERT_FALSE(b->status.events.empty());
  EXPECT_EQ(b->status.events.back().type, model::JobEventType::kReleased);
  EXPECT_EQ(b->status.events.back().reason,
            "node gpu-1 stopped it; node gpu-2 stopped it; it starts again from the beginning");

  // c starts waiting (pre-empted off gpu-2); a waits no more because it was cancelled (terminal).
  changed = update_job(*store_, &cache, "c", [](model::Job& j) -> Result<bool> {
    j.status.awaiting_release = model::PendingRelease{{"gpu-2"}, t0()};
    return true;
  }, std::nullopt);
  ASSERT_TRUE(changed);
  changed = update_job(*store_, &cache, "a", [](model::Job& j) -> Result<bool> {
    j.status.phase = model::JobPhase::kCancelled;
    j.status.finished_at = t0();
    return true;
  }, std::nullopt);
  ASSERT_TRUE(changed);
  EXPECT_EQ(indexed(cache), (std::set<std::string>{"c"}));
  EXPECT_EQ(owed(cache), (std::map<std::string, int64_t>{{"gpu-2", 1}}));

  // A cache started later on the same store lists the same; a deleted job leaves both.
  ObjectCache later(*store_);
  ASSERT_TRUE(later.start());
  EXPECT_EQ(indexed(later), (std::set<std::string>{"c"}));
  auto removed = store_->txn({store::Op::remove(kind::kJobs, "c", 0)});
  ASSERT_TRUE(removed);
  cache.apply_removed(kind::kJobs, "c", removed->revision);
  EXPECT_TRUE(indexed(cache).empty());
  EXPECT_TRUE(owed(cache).empty());
  for (int i = 0; i < 200 && !indexed(later).empty(); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  EXPECT_TRUE(indexed(later).empty()) << "the watch of the later cache did not drop the deleted job";
}

TEST_F(JobReleaseIndexTest, AStalledReleaseIsFoundThroughTheIndexAndLeavesIt) {
  ObjectCache cache(*store_);
  ASSERT_TRUE(cache.start());
  // gpu-2 is deleted: b is let go by it and still waits for gpu-1; nothing is overdue yet.
  auto removed = store_->txn({store::Op::remove(kind::kNodes, "gpu-2", 0)});
  ASSERT_TRUE(removed);
  cache.apply_removed(kind::kNodes, "gpu-2", removed->revision);
  const Duration timeout = std::chrono::minutes(5);
  EXPECT_EQ(release_stalled(*store_, cache, t0() + std::chrono::seconds(10), timeout), 1u);
  EXPECT_EQ(owed(cache), (std::map<std::string, int64_t>{{"gpu-1", 2}}));
  // Past the timeout gpu-1 is let go of both: the index is empty, the jobs say why.
  EXPECT_EQ(release_stalled(*store_, cache, t0() + timeout + std::chrono::seconds(1), timeout), 2u);
  EXPECT_TRUE(indexed(cache).empty());
  auto b = get(cache, "b");
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->status.awaiting_release);
  ASSERT_FALSE(b->status.events.empty());
  EXPECT_EQ(b->status.events.back().type, model::JobEventType::kReleased);
  EXPECT_NE(b->status.events.back().reason.find("did not release it within 5m"), std::string::npos)
      << b->status.events.back().reason;
  EXPECT_EQ(release_stalled(*store_, cache, t0() + timeout + std::chrono::seconds(2), timeout), 0u);
}

class JobIndexesTest : public StoreTest {
 protected:
  void SetUp() override {
    model::Job moving = bound("m", model::JobPhase::kRunning, "gpu-2", 8000);
    moving.status.migration = model::Migration{.to = "gpu-1", .requested_at = t0()};
    create({bound("p", model::JobPhase::kPending, "", 500), bound("s", model::JobPhase::kScheduled, "gpu-1", 1000),
            bound("r", model::JobPhase::kRunning, "gpu-1", 2000), moving,
            bound("done", model::JobPhase::kSucceeded, "gpu-1", 4000)});
  }

  static std::set<std::string> holding(const ObjectCache& cache) { return ids(cache, &ObjectCache::jobs_holding_gpus); }
  static std::set<std::string> migrating(const ObjectCache& cache) { return ids(cache, &ObjectCache::jobs_migrating); }
  // The ids indexed under `node`, checked like ids().
  static std::set<std::string> on(const ObjectCache& cache, const std::string& node) {
    return cache.read([&](const ObjectCache& c) {
      std::set<std::string> out;
      auto jobs = c.jobs_by_node.find(node);
      if (jobs == c.jobs_by_node.end()) return out;
      EXPECT_FALSE(jobs->second.empty()) << node << " is kept with no job";
      for (const auto& [id, job] : jobs->second) {
        EXPECT_EQ(job, c.jobs.get(id).object) << id << " is indexed with a record the cache no longer holds";
        EXPECT_TRUE(model::bound_to(*job, node)) << id << " is indexed under " << node;
        out.insert(id);
      }
      return out;
    });
  }
  void change(ObjectCache& cache, const std::string& id, std::function<void(model::Job&)> edit) {
    auto changed = update_job(*store_, &cache, id, [&](model::Job& j) -> Result<bool> {
      edit(j);
      return true;
    }, std::nullopt);
    ASSERT_TRUE(changed) << changed.error().to_string();
  }
};

TEST_F(JobIndexesTest, FollowEveryWriteAndADeletionAndAreRebuiltByACacheStartedLater) {
  ObjectCache cache(*store_);
  ASSERT_TRUE(cache.start());
  EXPECT_EQ(holding(cache), (std::set<std::string>{"m", "r", "s"}));
  EXPECT_EQ(migrating(cache), (std::set<std::string>{"m"}));
  EXPECT_EQ(on(cache, "gpu-1"), (std::set<std::string>{"done", "r", "s"}));  // a finished job stays listed there
  EXPECT_EQ(on(cache, "gpu-2"), (std::set<std::string>{"m"}));

  change(cache, "p", [](model::Job& j) {  // bound: it holds GPUs from now on
    j.status.phase = model::JobPhase::kScheduled;
    j.status.placement = {{"gpu-2", {}}};
  });
  change(cache, "s", [](model::Job& j) {  // started: still holds them
    j.status.phase = model::JobPhase::kRunning;
    j.status.started_at = t0();
  });
  change(cache, "r", [](model::Job& j) {  // finished: holds nothing
    j.status.phase = model::JobPhase::kFailed;
    j.status.finished_at = t0() + 2min;
  });
  change(cache, "m", [](model::Job& j) { j.status.migration.reset(); });  // moved: still holds GPUs
  EXPECT_EQ(holding(cache), (std::set<std::string>{"m", "p", "s"}));
  EXPECT_TRUE(migrating(cache).empty());
  EXPECT_EQ(on(cache, "gpu-1"), (std::set<std::string>{"done", "r", "s"}));
  EXPECT_EQ(on(cache, "gpu-2"), (std::set<std::string>{"m", "p"}));

  change(cache, "m", [](model::Job& j) { preempt(j, t0() + 3min, "pre-empted"); });  // Pending again
  change(cache, "s", [](model::Job& j) { j.status.migration = model::Migration{.to = "gpu-2", .requested_at = t0()}; });
  EXPECT_EQ(holding(cache), (std::set<std::string>{"p", "s"}));
  EXPECT_EQ(migrating(cache), (std::set<std::string>{"s"}));
  EXPECT_EQ(on(cache, "gpu-2"), (std::set<std::string>{"p"}));  // m's placement was cleared
  // A gang bound twice to gpu-2 and once to gpu-1 is listed once under each; moved wholly to gpu-1,
  // it leaves gpu-2, which is then kept only for p.
  change(cache, "p", [](model::Job& j) {
    j.status.placement = {{"gpu-2", {}}, {"gpu-1", {}}, {"gpu-2", {}}};
  });
  EXPECT_EQ(on(cache, "gpu-1"), (std::set<std::string>{"done", "p", "r", "s"}));
  EXPECT_EQ(on(cache, "gpu-2"), (std::set<std::string>{"p"}));
  change(cache, "p", [](model::Job& j) { j.status.placement = {{"gpu-1", {}}}; });
  EXPECT_TRUE(on(cache, "gpu-2").empty());
  EXPECT_EQ(cache.read([](const ObjectCache& c) { return c.jobs_by_node.count("gpu-2"); }), 0u);

  // A cache started later on the same store lists the same; a deleted job leaves every index.
  ObjectCache later(*store_);
  ASSERT_TRUE(later.start());
  EXPECT_EQ(holding(later), (std::set<std::string>{"p", "s"}));
  EXPECT_EQ(migrating(later), (std::set<std::string>{"s"}));
  EXPECT_EQ(on(later, "gpu-1"), (std::set<std::string>{"done", "p", "r", "s"}));
  auto removed = store_->txn({store::Op::remove(kind::kJobs, "s", 0)});
  ASSERT_TRUE(removed);
  cache.apply_removed(kind::kJobs, "s", removed->revision);
  EXPECT_EQ(holding(cache), (std::set<std::string>{"p"}));
  EXPECT_TRUE(migrating(cache).empty());
  EXPECT_EQ(on(cache, "gpu-1"), (std::set<std::string>{"done", "p", "r"}));
  for (int i = 0; i < 200 && !migrating(later).empty(); ++i) std::this_thread::sleep_for(10ms);
  EXPECT_TRUE(migrating(later).empty()) << "the watch of the later cache did not drop the deleted job";
  EXPECT_EQ(holding(later), (std::set<std::string>{"p"}));
  EXPECT_EQ(on(later, "gpu-1"), (std::set<std::string>{"done", "p", "r"}));
}

TEST_F(JobIndexesTest, TheRoomLeftOnNodesCountsTheJobsHoldingGpusAndTheMovesUnderWay) {
  ObjectCache cache(*store_);
  ASSERT_TRUE(cache.start());
  auto room = cache.read([](const ObjectCache& c) { return free_room(c); });
  // gpu-1: s (1000) and r (2000) run there and m (8000) moves there; done (4000) holds nothing.
  EXPECT_EQ(room["gpu-1"].cpu_milli, 64000 - 1000 - 2000 - 8000);
  ASSERT_EQ(room["gpu-1"].gpus.size(), 1u);
  EXPECT_EQ(room["gpu-1"].gpus[0].blocks, model::kBlocksPerGpu - 40);
  EXPECT_EQ(room["gpu-2"].cpu_milli, 64000 - 8000);
}

TEST_F(JobIndexesTest, ThePeriodicPassesFindTheirJobsThroughTheIndexesAndLeaveFinishedOnesAlone) {
  ObjectCache cache(*store_);
  ASSERT_TRUE(cache.start());
  const Time now = t0() + 11min;
  MetricFamily given_up("cnlab_migrations_total", "moves", MetricFamily::Type::kCounter);
  bool woken = false;
  MigrationWatch watch(*store_, cache, 1min, {{"production", 10min}}, [&] { return now; }, [&] { woken = true; },
                       given_up);
  watch.check_once();
  // m's move had no word for 11 minutes: given up, it runs on where it was; the scheduler is woken.
  auto m = get(cache, "m");
  ASSERT_TRUE(m);
  EXPECT_FALSE(m->status.migration);
  ASSERT_FALSE(m->status.events.empty());
  EXPECT_EQ(m->status.events.back().type, model::JobEventType::kMigrationFailed);
  EXPECT_TRUE(woken);
  EXPECT_TRUE(migrating(cache).empty());
  // r has run 11 minutes without a checkpoint: one is asked for. s (not started) and done (finished) are not.
  EXPECT_EQ(get(cache, "r")->status.checkpoint_requested_at, now);
  EXPECT_FALSE(get(cache, "s")->status.checkpoint_requested_at);
  EXPECT_FALSE(get(cache, "done")->status.checkpoint_requested_at);

  // Idle for 11 minutes against a 5-minute limit: r and m (running, with GPUs) are reclaimed; the
  // finished job and the Scheduled one are not.
  IdleReclaim reclaim(*store_, cache, {{"production", 5min}}, [&] { return now; });
  auto reclaimed = reclaim.check_once();
  EXPECT_EQ(std::set<std::string>(reclaimed.begin(), reclaimed.end()), (std::set<std::string>{"m", "r"}));
  EXPECT_TRUE(get(cache, "r")->status.cancel_requested);
  EXPECT_FALSE(get(cache, "done")->status.cancel_requested);
  EXPECT_FALSE(get(cache, "s")->status.cancel_requested);
}

}  // namespace
}  // namespace cnlab::server

// The object cache's index of jobs waiting for their nodes to release them, which node reads and
// the node-lifecycle pass use instead of walking every job: it follows each write, a deletion and
// a cache started on an existing store, and what releases_owed and release_stalled read from it
// agrees with the jobs themselves. In process, on a real SQLite store.
#include <gtest/gtest.h>

#include <set>
#include <thread>

#include "server/job_release.h"
#include "server/job_writes.h"
#include "server_process.h"

namespace cnlab::server {
namespace {

using test_support::TempDir;

Time t0() { return *parse_rfc3339("2026-12-01T10:00:00Z", "t"); }

model::Node node(const std::string& name) {
  model::Node n;
  n.meta.name = name;
  n.cpu_milli = 64000;
  n.memory_mib = 512 * 1024;
  n.last_heartbeat = t0();
  return n;
}

// A Pending job that waits for `nodes` to release it (none: it waits for nothing).
model::Job job(const std::string& id, std::vector<std::string> nodes) {
  model::Job j;
  j.meta.name = id;
  j.spec.project = "default";
  j.spec.user = "alice";
  j.spec.command = {"true"};
  j.status.submitted_at = t0();
  if (!nodes.empty()) j.status.awaiting_release = model::PendingRelease{std::move(nodes), t0()};
  return j;
}

class JobReleaseIndexTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto opened = store::open_sqlite_store({.path = dir_.path() + "/store.db"});
    ASSERT_TRUE(opened);
    store_ = std::move(*opened);
    std::vector<store::Op> ops;
    for (const char* name : {"gpu-1", "gpu-2"}) ops.push_back(store::Op::create(kind::kNodes, name, to_json(node(name)).dump()));
    for (const auto& j : {job("a", {"gpu-1"}), job("b", {"gpu-1", "gpu-2"}), job("c", {})}) {
      ops.push_back(store::Op::create(kind::kJobs, j.meta.name, to_json(j).dump()));
    }
    ASSERT_TRUE(store_->txn(std::move(ops)));
  }

  std::map<std::string, int64_t> owed(const ObjectCache& cache) {
    return cache.read([](const ObjectCache& c) { return releases_owed(c); });
  }
  std::set<std::string> indexed(const ObjectCache& cache) {
    return cache.read([](const ObjectCache& c) {
      std::set<std::string> ids;
      for (const auto& [id, job] : c.jobs_awaiting_release) ids.insert(id);
      return ids;
    });
  }

  TempDir dir_;
  std::unique_ptr<store::Store> store_;
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
  auto b = cache.read([](const ObjectCache& c) { return c.jobs.get("b").object; });
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
  auto b = cache.read([](const ObjectCache& c) { return c.jobs.get("b").object; });
  ASSERT_TRUE(b);
  EXPECT_FALSE(b->status.awaiting_release);
  ASSERT_FALSE(b->status.events.empty());
  EXPECT_EQ(b->status.events.back().type, model::JobEventType::kReleased);
  EXPECT_NE(b->status.events.back().reason.find("did not release it within 5m"), std::string::npos)
      << b->status.events.back().reason;
  EXPECT_EQ(release_stalled(*store_, cache, t0() + timeout + std::chrono::seconds(2), timeout), 0u);
}

}  // namespace
}  // namespace cnlab::server

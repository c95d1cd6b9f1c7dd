#include "agent/files/workspace_cache.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <mutex>
#include <thread>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/files/digest.h"
#include "agent/files/workspace_pack.h"
#include "files_test_support.h"

namespace cnlab::agent {
namespace {

using test_support::exists_no_follow;
using test_support::read_file;
using test_support::TempDir;
using test_support::write_file;
using ::testing::HasSubstr;

// A workspace "on the server": its archive bytes and digest, and a fetch that copies them and
// counts how often it ran.
struct Served {
  std::string bytes;
  std::string digest;
  std::atomic<int> fetches{0};

  WorkspaceCache::FetchFn fetch() {
    return [this](const std::string& temp_path) -> Status {
      ++fetches;
      write_file(temp_path, bytes);
      return Status::ok();
    };
  }
};

class CacheTest : public ::testing::Test {
 protected:
  // Packs a workspace holding one file with `content` (plus `padding` bytes) and serves it.
  std::unique_ptr<Served> serve(const std::string& content, size_t padding = 0) {
    TempDir src;
    write_file(src / "main.py", content);
    if (padding > 0) write_file(src / "pad.bin", std::string(padding, '\0'));
    PackOptions options;
    options.output_path = tmp_ / ("served" + std::to_string(++served_count_) + ".tgz");
    auto packed = pack_workspace(src.path(), options);
    CNLAB_CHECK(packed.has_value());
    auto served = std::make_unique<Served>();
    served->bytes = read_file(packed->archive_path);
    served->digest = packed->digest;
    std::filesystem::remove(packed->archive_path);
    return served;
  }

  std::string cache_dir() const { return tmp_ / "cache"; }
  std::string archive_of(const Served& s) const { return cache_dir() + "/" + s.digest.substr(7) + ".tar.gz"; }

  TempDir tmp_;
  int served_count_ = 0;
};

TEST_F(CacheTest, SecondGetIsAHitWithoutFetching) {
  auto ws = serve("print(1)\n");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  auto first = cache.get_or_fetch(ws->digest, ws->fetch());
  ASSERT_TRUE(first) << first.error().to_string();
  EXPECT_TRUE(first->fetched());
  auto second = cache.get_or_fetch(ws->digest, ws->fetch());
  ASSERT_TRUE(second);
  EXPECT_FALSE(second->fetched());
  EXPECT_EQ(ws->fetches.load(), 1);
  EXPECT_EQ(second->archive_path(), archive_of(*ws));
  EXPECT_EQ(read_file(second->archive_path()), ws->bytes);
  EXPECT_EQ(cache.stats().hits, 1);
  EXPECT_EQ(cache.stats().fetches, 1);
}

TEST_F(CacheTest, ConcurrentCallersForOneDigestShareOneDownload) {
  auto ws = serve("print(2)\n");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  constexpr int kCallers = 8;
  std::mutex mu;
  std::condition_variable cv;
  int started = 0;
  // The download waits (with a deadline) until every caller has started, so they overlap it.
  WorkspaceCache::FetchFn slow_fetch = [&](const std::string& temp_path) -> Status {
    {
      std::unique_lock lock(mu);
      cv.wait_for(lock, std::chrono::seconds(5), [&] { return started == kCallers; });
    }
    return ws->fetch()(temp_path);
  };
  std::vector<std::thread> threads;
  std::vector<std::string> paths(kCallers);
  std::atomic<int> downloaded_by{0};
  for (int i = 0; i < kCallers; ++i) {
    threads.emplace_back([&, i] {
      {
        std::lock_guard lock(mu);
        ++started;
      }
      cv.notify_all();
      auto held = cache.get_or_fetch(ws->digest, slow_fetch);
      if (held) {
        paths[i] = held->archive_path();
        if (held->fetched()) ++downloaded_by;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(ws->fetches.load(), 1);
  EXPECT_EQ(downloaded_by.load(), 1);
  for (const auto& p : paths) EXPECT_EQ(p, archive_of(*ws));
}

TEST_F(CacheTest, FailedFetchIsReturnedAndRetriedNextTime) {
  auto ws = serve("print(3)\n");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  int calls = 0;
  auto flaky = [&](const std::string& temp_path) -> Status {
    if (++calls == 1) return Error::of(ErrorCode::kUnavailable, "server", "https://cp", "connection refused");
    return ws->fetch()(temp_path);
  };
  auto first = cache.get_or_fetch(ws->digest, flaky);
  ASSERT_FALSE(first);
  EXPECT_EQ(first.error().code, ErrorCode::kUnavailable);
  auto second = cache.get_or_fetch(ws->digest, flaky);
  ASSERT_TRUE(second);
  EXPECT_EQ(calls, 2);
}

TEST_F(CacheTest, ThrowingFetchBecomesAnError) {
  auto ws = serve("print(4)\n");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  auto held = cache.get_or_fetch(ws->digest, [](const std::string&) -> Status { throw std::runtime_error("boom"); });
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error().code, ErrorCode::kInternal);
  EXPECT_THAT(held.error().message, HasSubstr("boom"));
}

TEST_F(CacheTest, DownloadWithAnotherDigestIsNotKept) {
  auto ws = serve("print(5)\n");
  auto other = serve("print(6)\n");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  auto held = cache.get_or_fetch(ws->digest, other->fetch());
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error().field, "digest");
  EXPECT_THAT(held.error().message, HasSubstr(other->digest));
  EXPECT_FALSE(exists_no_follow(archive_of(*ws)));
  EXPECT_THAT(test_support::names_in(cache_dir() + "/.incoming"), ::testing::ElementsAre());
  EXPECT_EQ(cache.stats().archives, 0);
}

TEST_F(CacheTest, MalformedDigestIsRefusedWithoutFetching) {
  auto ws = serve("x");
  WorkspaceCache cache(cache_dir(), 1 << 20);
  auto held = cache.get_or_fetch("sha256:XYZ", ws->fetch());
  ASSERT_FALSE(held);
  EXPECT_EQ(held.error().field, "digest");
  EXPECT_EQ(ws->fetches.load(), 0);
}

TEST_F(CacheTest, LeastRecentlyUsedIsEvictedOverTheLimit) {
  auto a = serve("a", 5000);
  auto b = serve("b", 6000);
  auto c = serve("c", 7000);
  int64_t each = static_cast<int64_t>(std::max({a->bytes.size(), b->bytes.size(), c->bytes.size()}));
  WorkspaceCache cache(cache_dir(), 2 * each + each / 2);  // room for two
  ASSERT_TRUE(cache.get_or_fetch(a->digest, a->fetch()));
  ASSERT_TRUE(cache.get_or_fetch(b->digest, b->fetch()));
  ASSERT_TRUE(cache.get_or_fetch(a->digest, a->fetch()));  // now b is the least recently used
  ASSERT_TRUE(cache.get_or_fetch(c->digest, c->fetch()));
  EXPECT_TRUE(exists_no_follow(archive_of(*a)));
  EXPECT_FALSE(exists_no_follow(archive_of(*b)));
  EXPECT_TRUE(exists_no_follow(archive_of(*c)));
  EXPECT_EQ(cache.stats().archives, 2);
  ASSERT_TRUE(cache.get_or_fetch(b->digest, b->fetch()));
  EXPECT_EQ(b->fetches.load(), 2);
  EXPECT_EQ(a->fetches.load(), 1);
}

TEST_F(CacheTest, ArchiveInUseIsNeverEvicted) {
  auto a = serve("a", 5000);
  auto b = serve("b", 6000);
  WorkspaceCache cache(cache_dir(), static_cast<int64_t>(std::max(a->bytes.size(), b->bytes.size())) + 10);  // one
  {
    auto held_a = cache.get_or_fetch(a->digest, a->fetch());
    ASSERT_TRUE(held_a);
    auto held_b = cache.get_or_fetch(b->digest, b->fetch());
    ASSERT_TRUE(held_b);
    EXPECT_TRUE(exists_no_follow(held_a->archive_path()));  // over the limit, but in use
    EXPECT_TRUE(exists_no_follow(held_b->archive_path()));
    held_a = cache.get_or_fetch(b->digest, b->fetch());      // a released; b held twice
    EXPECT_FALSE(exists_no_follow(archive_of(*a)));
    EXPECT_TRUE(exists_no_follow(archive_of(*b)));
  }
  EXPECT_EQ(cache.stats().archives, 1);
}

TEST_F(CacheTest, ArchivesSurviveARestart) {
  auto ws = serve("print(7)\n");
  {
    WorkspaceCache cache(cache_dir(), 1 << 20);
    ASSERT_TRUE(cache.get_or_fetch(ws->digest, ws->fetch()));
  }
  write_file(cache_dir() + "/.incoming/leftover.partial", "half a download");
  WorkspaceCache restarted(cache_dir(), 1 << 20);
  auto held = restarted.get_or_fetch(ws->digest, ws->fetch());
  ASSERT_TRUE(held);
  EXPECT_FALSE(held->fetched());
  EXPECT_EQ(ws->fetches.load(), 1);
  EXPECT_FALSE(exists_no_follow(cache_dir() + "/.incoming/leftover.partial"));
}


TEST_F(CacheTest, OneDownloadServesEveryLaterUnpackOfTheSameWorkspace) {
  TempDir src;
  for (int i = 0; i < 100; ++i) write_file(src / ("pkg" + std::to_string(i % 10) + "/m" + std::to_string(i) + ".py"), std::string(2000, 'x'));
  PackOptions options;
  options.output_path = tmp_ / "ws.tgz";
  auto packed = pack_workspace(src.path(), options);
  ASSERT_TRUE(packed);
  Served served;
  served.bytes = read_file(packed->archive_path);
  served.digest = packed->digest;
  WorkspaceCache cache(cache_dir(), 1 << 30);
  ASSERT_TRUE(cache.unpack_to(served.digest, served.fetch(), tmp_ / "job0"));
  for (int i = 1; i <= 9; ++i) {
    auto result = cache.unpack_to(served.digest, served.fetch(), tmp_ / ("job" + std::to_string(i)));
    ASSERT_TRUE(result) << result.error().to_string();
    EXPECT_EQ(result->file_count, 100);
  }
  EXPECT_EQ(served.fetches.load(), 1);
  EXPECT_EQ(read_file(tmp_ / "job9/pkg3/m43.py"), std::string(2000, 'x'));
}

}  // namespace
}  // namespace cnlab::agent

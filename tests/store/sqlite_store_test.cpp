#include <fcntl.h>
#include <openssl/evp.h>
#include <poll.h>
#include <signal.h>
#include <spawn.h>
#include <sqlite3.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "store/store.h"

namespace cnlab::store {
namespace {

using testing::HasSubstr;
using Clock = std::chrono::steady_clock;

constexpr auto kDeadline = std::chrono::seconds(60);

class TempDir {
 public:
  TempDir() {
    std::string pattern = (std::filesystem::temp_directory_path() / "cnlab-store-XXXXXX").string();
    CNLAB_CHECK(::mkdtemp(pattern.data()) != nullptr);
    path_ = pattern;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  std::string file(std::string_view name) const { return (path_ / name).string(); }

 private:
  std::filesystem::path path_;
};

class StoreTest : public testing::Test {
 protected:
  std::unique_ptr<Store> open(SqliteOptions options = {}) {
    if (options.path.empty()) options.path = dir_.file("state/cnlab.db");
    auto store = open_sqlite_store(options);
    EXPECT_TRUE(store) << store.error().to_string();
    return store ? std::move(*store) : nullptr;
  }

  TempDir dir_;
};

std::string job(std::string_view name, std::map<std::string, std::string> labels = {}, std::string_view node = "",
                std::string_view phase = "Pending") {
  nlohmann::json value = {{"metadata", {{"name", name}, {"labels", labels}}},
                          {"spec", {{"gpu", "h100-25"}}},
                          {"status", {{"phase", phase}}}};
  if (!node.empty()) value["spec"]["node"] = node;
  return value.dump();
}

std::vector<std::string> keys_of(const std::vector<Record>& records) {
  std::vector<std::string> keys;
  for (const Record& record : records) keys.push_back(record.key);
  return keys;
}

std::string sha256_hex(const std::string& text) {
  unsigned char digest[EVP_MAX_MD_SIZE];
  unsigned int size = 0;
  CNLAB_CHECK(EVP_Digest(text.data(), text.size(), digest, &size, EVP_sha256(), nullptr) == 1);
  std::string hex;
  for (unsigned int i = 0; i < size; ++i) hex += fmt::format("{:02x}", digest[i]);
  return hex;
}

// Checks seq 1..n are contiguous, each links to the previous hash, and each hash is
// sha256(prev_hash + "\n" + record), computed here independently of the store.
void expect_intact_chain(const std::vector<AuditEntry>& entries) {
  std::string prev(64, '0');
  for (size_t i = 0; i < entries.size(); ++i) {
    const AuditEntry& entry = entries[i];
    ASSERT_EQ(entry.seq, static_cast<int64_t>(i + 1));
    ASSERT_EQ(entry.prev_hash, prev) << "seq " << entry.seq;
    ASSERT_EQ(entry.hash, sha256_hex(entry.prev_hash + "\n" + entry.record)) << "seq " << entry.seq;
    prev = entry.hash;
  }
}

// Collects watch events; waits on a condition variable with a deadline instead of sleeping.
class Collector {
 public:
  Store::WatchCallbacks callbacks() {
    return {[this](const std::vector<Event>& events) {
              std::lock_guard lock(mu_);
              events_.insert(events_.end(), events.begin(), events.end());
              ++calls_;
              cv_.notify_all();
            },
            [this](const Error& error) {
              std::lock_guard lock(mu_);
              closed_ = error;
              cv_.notify_all();
            }};
  }

  // True once `done(events)` holds, false at the deadline.
  bool wait_until(const std::function<bool(const std::vector<Event>&)>& done) {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return done(events_); });
  }
  bool wait_for_count(size_t count) {
    return wait_until([&](const std::vector<Event>& events) { return events.size() >= count; });
  }
  bool wait_for_revision(int64_t revision) {
    return wait_until([&](const std::vector<Event>& events) {
      return !events.empty() && events.back().record.mod_revision >= revision;
    });
  }
  bool wait_for_close() {
    std::unique_lock lock(mu_);
    return cv_.wait_for(lock, kDeadline, [&] { return closed_.has_value(); });
  }

  std::vector<Event> events() {
    std::lock_guard lock(mu_);
    return events_;
  }
  std::optional<Error> closed() {
    std::lock_guard lock(mu_);
    return closed_;
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<Event> events_;
  int calls_ = 0;
  std::optional<Error> closed_;
};

std::vector<int64_t> revisions_of(const std::vector<Event>& events) {
  std::vector<int64_t> revisions;
  for (const Event& event : events) revisions.push_back(event.record.mod_revision);
  return revisions;
}

std::vector<int64_t> range(int64_t first, int64_t last) {
  std::vector<int64_t> values;
  for (int64_t i = first; i <= last; ++i) values.push_back(i);
  return values;
}

// ---- CRUD and errors ---------------------------------------------------------------------------

TEST_F(StoreTest, CreatedRecordReadsBackWithItsRevisions) {
  auto store = open();
  auto created = store->create("jobs", "vision/train-1", job("train-1"));
  ASSERT_TRUE(created) << created.error().to_string();
  EXPECT_EQ(created->create_revision, 1);
  EXPECT_EQ(created->mod_revision, 1);

  auto read = store->get("jobs", "vision/train-1");
  ASSERT_TRUE(read);
  EXPECT_EQ(*read, *created);
  EXPECT_EQ(read->value, job("train-1"));
  EXPECT_EQ(store->revision(), 1);
}

TEST_F(StoreTest, CreateOfAnExistingKeyIsAlreadyExists) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "a", job("a")));
  auto again = store->create("jobs", "a", job("a2"));
  ASSERT_FALSE(again);
  EXPECT_EQ(again.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(again.error().value, "a");
  EXPECT_EQ(store->get("jobs", "a")->value, job("a"));
  EXPECT_EQ(store->revision(), 1);
}

TEST_F(StoreTest, MissingKeyIsNotFoundForGetUpdateAndRemove) {
  auto store = open();
  EXPECT_EQ(store->get("jobs", "nope").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->update("jobs", "nope", job("x"), 0).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->remove("jobs", "nope", 0).error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->revision(), 0);
}

TEST_F(StoreTest, UpdateKeepsCreateRevisionAndMovesModRevision) {
  auto store = open();
  auto created = store->create("jobs", "a", job("a"));
  ASSERT_TRUE(store->create("nodes", "gpu-1", "{}"));
  auto updated = store->update("jobs", "a", job("a", {}, "gpu-1", "Running"), created->mod_revision);
  ASSERT_TRUE(updated) << updated.error().to_string();
  EXPECT_EQ(updated->create_revision, 1);
  EXPECT_EQ(updated->mod_revision, 3);
  auto blind = store->update("jobs", "a", job("a", {}, "gpu-1", "Done"), /*expected_revision=*/0);
  ASSERT_TRUE(blind);
  EXPECT_EQ(blind->mod_revision, 4);
  EXPECT_EQ(store->get("jobs", "a")->value, job("a", {}, "gpu-1", "Done"));
}

TEST_F(StoreTest, StaleCompareAndSwapIsConflictNamingExpectedAndCurrentRevisions) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "a", job("a")));
  ASSERT_TRUE(store->update("jobs", "a", job("a", {}, "", "Running"), 1));
  auto stale = store->update("jobs", "a", job("a", {}, "", "Failed"), 1);
  ASSERT_FALSE(stale);
  EXPECT_EQ(stale.error().code, ErrorCode::kConflict);
  EXPECT_EQ(stale.error().field, "revision");
  EXPECT_EQ(stale.error().value, "1");
  EXPECT_THAT(stale.error().message, HasSubstr("at revision 2"));
  auto stale_remove = store->remove("jobs", "a", 1);
  ASSERT_FALSE(stale_remove);
  EXPECT_EQ(stale_remove.error().code, ErrorCode::kConflict);
  EXPECT_EQ(store->revision(), 2);
}

TEST_F(StoreTest, RemoveReturnsTheLastValueAndTheKeyIsGone) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "a", job("a")));
  auto removed = store->remove("jobs", "a", 1);
  ASSERT_TRUE(removed) << removed.error().to_string();
  EXPECT_EQ(removed->value, job("a"));
  EXPECT_EQ(removed->create_revision, 1);
  EXPECT_EQ(store->get("jobs", "a").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->revision(), 2);
  // The key can be created again, with a new create_revision.
  auto again = store->create("jobs", "a", job("a"));
  ASSERT_TRUE(again);
  EXPECT_EQ(again->create_revision, 3);
}

TEST_F(StoreTest, BadKindKeyOrValueIsInvalidArgumentNamingTheField) {
  auto store = open();
  struct Case {
    std::string kind, key, value, field;
  } cases[] = {
      {"", "a", "{}", "kind"},
      {"jobs", "", "{}", "key"},
      {"jobs", std::string(513, 'k'), "{}", "key"},
      {"jobs", "a\nb", "{}", "key"},
      {"jo\x01s", "a", "{}", "kind"},
      {"jobs", "a", "[1, 2]", "value"},
      {"jobs", "a", "not json", "value"},
      {"jobs", "a", "{\"a\": ", "value"},
      {"jobs", "a", "", "value"},
  };
  for (const Case& c : cases) {
    auto result = store->create(c.kind, c.key, c.value);
    ASSERT_FALSE(result) << c.field;
    EXPECT_EQ(result.error().code, ErrorCode::kInvalidArgument) << c.field;
    EXPECT_EQ(result.error().field, c.field);
  }
  EXPECT_TRUE(store->create("jobs", std::string(512, 'k'), "{}"));
  EXPECT_EQ(store->get("jobs", "").error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->txn({}).error().code, ErrorCode::kInvalidArgument);
  EXPECT_EQ(store->revision(), 1);
}

// ---- Transactions and revisions ----------------------------------------------------------------

TEST_F(StoreTest, RevisionsAreMonotonicAndSharedAcrossKinds) {
  auto store = open();
  EXPECT_EQ(store->create("jobs", "a", "{}")->mod_revision, 1);
  EXPECT_EQ(store->create("nodes", "a", "{}")->mod_revision, 2);
  EXPECT_EQ(store->create("projects", "p", "{}")->mod_revision, 3);
  EXPECT_EQ(store->update("jobs", "a", "{}", 1)->mod_revision, 4);
  EXPECT_EQ(store->revision(), 4);
}

TEST_F(StoreTest, TxnAppliesAllOpsAtOneRevisionOrNone) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "taken", "{}"));

  std::vector<Op> failing;
  failing.push_back(Op::create("jobs", "new-1", "{}"));
  failing.push_back(Op::create("nodes", "new-2", "{}"));
  failing.push_back(Op::create("jobs", "taken", "{}"));
  auto failed = store->txn(std::move(failing), R"({"who":"x"})");
  ASSERT_FALSE(failed);
  EXPECT_EQ(failed.error().code, ErrorCode::kAlreadyExists);
  EXPECT_EQ(store->get("jobs", "new-1").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->get("nodes", "new-2").error().code, ErrorCode::kNotFound);
  EXPECT_EQ(store->revision(), 1);
  EXPECT_TRUE(store->audit_log(1, 10)->empty());

  std::vector<Op> ok;
  ok.push_back(Op::create("jobs", "new-1", "{}"));
  ok.push_back(Op::create("nodes", "new-2", "{}"));
  ok.push_back(Op::update("jobs", "taken", R"({"x":1})", 1));
  auto committed = store->txn(std::move(ok));
  ASSERT_TRUE(committed) << committed.error().to_string();
  EXPECT_EQ(committed->revision, 2);
  ASSERT_EQ(committed->records.size(), 3u);
  for (const Record& record : committed->records) EXPECT_EQ(record.mod_revision, 2);
  EXPECT_EQ(store->get("nodes", "new-2")->mod_revision, 2);
}

TEST_F(StoreTest, LaterOpsOfATxnSeeTheEarlierOnes) {
  auto store = open();
  std::vector<Op> ops;
  ops.push_back(Op::create("jobs", "a", R"({"v":1})"));
  ops.push_back(Op::update("jobs", "a", R"({"v":2})", 0));
  auto result = store->txn(std::move(ops));
  ASSERT_TRUE(result) << result.error().to_string();
  auto read = store->get("jobs", "a");
  EXPECT_EQ(read->value, R"({"v":2})");
  EXPECT_EQ(read->create_revision, 1);
  EXPECT_EQ(read->mod_revision, 1);
}

TEST_F(StoreTest, FailedTxnInAGroupCommitLeavesTheOthersCommittedAndConsumesNoRevision) {
  auto store = open();
  // Hold the writer inside the first transaction's callback so the next three queue up and are
  // committed as one batch.
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false;
  store->txn_async({Op::create("jobs", "first", "{}")}, std::nullopt, [&](Result<TxnResult> result) {
    EXPECT_TRUE(result);
    std::unique_lock lock(mu);
    entered = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
  });
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return entered; }));
  }

  std::vector<std::optional<Result<TxnResult>>> results(3);
  auto done = [&](size_t i) {
    return [&, i](Result<TxnResult> result) {
      std::lock_guard lock(mu);
      results[i].emplace(std::move(result));
      cv.notify_all();
    };
  };
  store->txn_async({Op::create("jobs", "b", "{}")}, R"({"n":"b"})", done(0));
  std::vector<Op> doomed;
  doomed.push_back(Op::create("jobs", "c", "{}"));
  doomed.push_back(Op::update("jobs", "missing", "{}", 0));
  store->txn_async(std::move(doomed), R"({"n":"c"})", done(1));
  store->txn_async({Op::create("jobs", "d", "{}")}, R"({"n":"d"})", done(2));
  {
    std::unique_lock lock(mu);
    release = true;
    cv.notify_all();
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] {
      return std::all_of(results.begin(), results.end(), [](const auto& r) { return r.has_value(); });
    }));
  }

  ASSERT_TRUE(*results[0]);
  EXPECT_EQ((*results[0])->revision, 2);
  ASSERT_FALSE(*results[1]);
  EXPECT_EQ(results[1]->error().code, ErrorCode::kNotFound);
  ASSERT_TRUE(*results[2]);
  EXPECT_EQ((*results[2])->revision, 3);
  EXPECT_TRUE(store->get("jobs", "b"));
  EXPECT_EQ(store->get("jobs", "c").error().code, ErrorCode::kNotFound);
  EXPECT_TRUE(store->get("jobs", "d"));
  EXPECT_EQ(store->revision(), 3);
  auto audit = store->audit_log(1, 10);
  ASSERT_EQ(audit->size(), 2u);
  EXPECT_EQ((*audit)[0].record, R"({"n":"b"})");
  EXPECT_EQ((*audit)[1].record, R"({"n":"d"})");
  expect_intact_chain(*audit);
}

TEST_F(StoreTest, AuditOnlyTxnGetsItsOwnRevision) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "a", "{}"));
  auto result = store->txn({}, R"({"who":"alice","what":"login"})");
  ASSERT_TRUE(result) << result.error().to_string();
  EXPECT_EQ(result->revision, 2);
  EXPECT_TRUE(result->records.empty());
  EXPECT_EQ(store->revision(), 2);
  auto audit = store->audit_log(1, 10);
  ASSERT_EQ(audit->size(), 1u);
  EXPECT_EQ((*audit)[0].revision, 2);
}

TEST_F(StoreTest, ConcurrentCompareAndSwapHasExactlyOneWinnerPerRevision) {
  auto store = open();
  ASSERT_TRUE(store->create("counters", "c", R"({"n":0})"));
  constexpr int kThreads = 8;
  constexpr int kWinsPerThread = 40;
  std::mutex mu;
  std::vector<std::pair<int64_t, int64_t>> wins;  // (expected revision, new revision)
  std::atomic<int> conflicts = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&] {
      for (int won = 0; won < kWinsPerThread;) {
        auto current = store->get("counters", "c");
        ASSERT_TRUE(current);
        int64_t n = nlohmann::json::parse(current->value)["n"].get<int64_t>();
        auto updated = store->update("counters", "c", fmt::format(R"({{"n":{}}})", n + 1), current->mod_revision);
        if (!updated) {
          ASSERT_EQ(updated.error().code, ErrorCode::kConflict) << updated.error().to_string();
          ++conflicts;
          continue;
        }
        ++won;
        std::lock_guard lock(mu);
        wins.emplace_back(current->mod_revision, updated->mod_revision);
      }
    });
  }
  for (auto& thread : threads) thread.join();

  auto final_value = store->get("counters", "c");
  EXPECT_EQ(nlohmann::json::parse(final_value->value)["n"].get<int64_t>(), kThreads * kWinsPerThread);
  EXPECT_EQ(store->revision(), 1 + kThreads * kWinsPerThread);
  // The wins form one chain: each started from the revision the previous win produced.
  std::sort(wins.begin(), wins.end());
  int64_t expected = 1;
  for (const auto& [from, to] : wins) {
    EXPECT_EQ(from, expected);
    EXPECT_EQ(to, from + 1);
    expected = to;
  }
}

TEST_F(StoreTest, ManyConcurrentWritersEachGetADistinctRevision) {
  auto store = open();
  constexpr int kThreads = 64;
  constexpr int kPerThread = 30;
  std::mutex mu;
  std::set<int64_t> revisions;
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kPerThread; ++i) {
        auto created = store->create("jobs", fmt::format("t{}/{}", t, i), job("x"));
        ASSERT_TRUE(created) << created.error().to_string();
        std::lock_guard lock(mu);
        EXPECT_TRUE(revisions.insert(created->mod_revision).second);
      }
    });
  }
  for (auto& thread : threads) thread.join();
  EXPECT_EQ(store->revision(), kThreads * kPerThread);
  EXPECT_EQ(*revisions.begin(), 1);
  EXPECT_EQ(*revisions.rbegin(), kThreads * kPerThread);
  EXPECT_EQ(store->list("jobs", {})->items.size(), static_cast<size_t>(kThreads * kPerThread));
}

// ---- List --------------------------------------------------------------------------------------

TEST_F(StoreTest, ListReturnsOneKindsKeysWithThePrefixInKeyOrder) {
  auto store = open();
  for (const char* key : {"vision/b", "nlp/a", "vision/a", "vision-x/a", "visio"}) {
    ASSERT_TRUE(store->create("jobs", key, "{}"));
  }
  ASSERT_TRUE(store->create("nodes", "vision/c", "{}"));
  auto listed = store->list("jobs", {.prefix = "vision/"});
  ASSERT_TRUE(listed) << listed.error().to_string();
  EXPECT_THAT(keys_of(listed->items), testing::ElementsAre("vision/a", "vision/b"));
  EXPECT_EQ(listed->revision, 6);
  EXPECT_TRUE(listed->continue_token.empty());
  EXPECT_THAT(keys_of(store->list("jobs", {})->items),
              testing::ElementsAre("nlp/a", "visio", "vision-x/a", "vision/a", "vision/b"));
  EXPECT_TRUE(store->list("projects", {})->items.empty());
}

TEST_F(StoreTest, ListFiltersByLabelAndFieldSelectors) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "a", job("a", {{"team", "vision"}}, "gpu-1", "Running")));
  ASSERT_TRUE(store->create("jobs", "b", job("b", {{"team", "vision"}}, "gpu-2", "Pending")));
  ASSERT_TRUE(store->create("jobs", "c", job("c", {{"team", "nlp"}}, "gpu-1", "Running")));
  ASSERT_TRUE(store->create("jobs", "d", job("d")));

  auto by = [&](std::string_view labels, std::string_view fields) {
    ListOptions options;
    options.selector = *Selector::parse(labels, fields);
    return keys_of(store->list("jobs", options)->items);
  };
  EXPECT_THAT(by("team=vision", ""), testing::ElementsAre("a", "b"));
  EXPECT_THAT(by("team!=vision", ""), testing::ElementsAre("c", "d"));
  EXPECT_THAT(by("team", "spec.node=gpu-1"), testing::ElementsAre("a", "c"));
  EXPECT_THAT(by("", "status.phase!=Running"), testing::ElementsAre("b", "d"));
  EXPECT_THAT(by("team=vision", "status.phase=Running"), testing::ElementsAre("a"));
}

TEST_F(StoreTest, ListPagesWithLimitAndContinueTokenAtTheFirstPagesRevision) {
  auto store = open();
  for (int i = 0; i < 7; ++i) {
    ASSERT_TRUE(store->create("jobs", fmt::format("p/{}", i), job("x", {{"even", i % 2 == 0 ? "yes" : "no"}})));
  }
  ASSERT_TRUE(store->create("jobs", "q/0", "{}"));

  ListOptions options{.prefix = "p/", .limit = 3};
  std::vector<std::string> seen;
  std::vector<size_t> page_sizes;
  int64_t first_revision = 0;
  for (int page = 0; page < 10; ++page) {
    auto listed = store->list("jobs", options);
    ASSERT_TRUE(listed) << listed.error().to_string();
    if (page == 0) {
      first_revision = listed->revision;
      // A write between pages: later pages show it, and the revision stays the first page's.
      ASSERT_TRUE(store->create("jobs", "p/9", "{}"));
    }
    EXPECT_EQ(listed->revision, first_revision);
    page_sizes.push_back(listed->items.size());
    for (const Record& record : listed->items) seen.push_back(record.key);
    if (listed->continue_token.empty()) break;
    options.continue_token = listed->continue_token;
  }
  EXPECT_EQ(first_revision, 8);
  EXPECT_THAT(page_sizes, testing::ElementsAre(3, 3, 2));
  EXPECT_THAT(seen, testing::ElementsAre("p/0", "p/1", "p/2", "p/3", "p/4", "p/5", "p/6", "p/9"));

  // Paging with a selector counts only matching items.
  ListOptions even{.prefix = "p/", .selector = *Selector::parse("even=yes", ""), .limit = 2};
  auto first = store->list("jobs", even);
  EXPECT_THAT(keys_of(first->items), testing::ElementsAre("p/0", "p/2"));
  even.continue_token = first->continue_token;
  auto second = store->list("jobs", even);
  EXPECT_THAT(keys_of(second->items), testing::ElementsAre("p/4", "p/6"));
  EXPECT_TRUE(second->continue_token.empty());
}

TEST_F(StoreTest, ListRejectsAContinueTokenItDidNotIssue) {
  auto store = open();
  for (std::string token : {"garbage!", "Zm9v", "MTph"}) {
    auto listed = store->list("jobs", {.continue_token = token});
    ASSERT_FALSE(listed) << token;
    EXPECT_EQ(listed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(listed.error().field, "continue");
  }
}

// ---- Watch -------------------------------------------------------------------------------------

TEST_F(StoreTest, WatchFromZeroSeesOnlyLaterEvents) {
  auto store = open();
  ASSERT_TRUE(store->create("jobs", "before", "{}"));
  Collector collector;
  auto handle = store->watch("jobs", "", 0, collector.callbacks());
  ASSERT_TRUE(handle) << handle.error().to_string();
  ASSERT_TRUE(store->create("jobs", "after", "{}"));
  ASSERT_TRUE(collector.wait_for_count(1));
  auto events = collector.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].record.key, "after");
  EXPECT_EQ(events[0].type, EventType::kPut);
  EXPECT_TRUE(events[0].created);
  EXPECT_EQ(events[0].record.mod_revision, 2);
}

TEST_F(StoreTest, WatchSeesOnlyItsKindAndPrefix) {
  auto store = open();
  Collector collector;
  auto handle = store->watch("jobs", "vision/", 0, collector.callbacks());
  ASSERT_TRUE(handle);
  ASSERT_TRUE(store->create("jobs", "nlp/a", "{}"));
  ASSERT_TRUE(store->create("nodes", "vision/a", "{}"));
  ASSERT_TRUE(store->create("jobs", "vision/a", "{}"));
  ASSERT_TRUE(collector.wait_for_count(1));
  auto events = collector.events();
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].record.kind, "jobs");
  EXPECT_EQ(events[0].record.key, "vision/a");
  EXPECT_EQ(events[0].record.mod_revision, 3);
}

TEST_F(StoreTest, WatchReportsUpdatesAndDeletesWithTheDeletionRevision) {
  auto store = open();
  Collector collector;
  auto handle = store->watch("jobs", "", 0, collector.callbacks());
  ASSERT_TRUE(handle);
  ASSERT_TRUE(store->create("jobs", "a", R"({"v":1})"));
  ASSERT_TRUE(store->update("jobs", "a", R"({"v":2})", 1));
  ASSERT_TRUE(store->remove("jobs", "a", 2));
  ASSERT_TRUE(collector.wait_for_count(3));
  auto events = collector.events();
  EXPECT_EQ(events[1].type, EventType::kPut);
  EXPECT_FALSE(events[1].created);
  EXPECT_EQ(events[1].record.value, R"({"v":2})");
  EXPECT_EQ(events[2].type, EventType::kDelete);
  EXPECT_EQ(events[2].record.value, R"({"v":2})");
  EXPECT_EQ(events[2].record.create_revision, 1);
  EXPECT_EQ(events[2].record.mod_revision, 3);

  // The same history, replayed from revision 0+: identical events.
  Collector replayed;
  auto again = store->watch("jobs", "", 1, replayed.callbacks());
  ASSERT_TRUE(again) << again.error().to_string();
  ASSERT_TRUE(replayed.wait_for_count(2));
  auto replay = replayed.events();
  ASSERT_EQ(replay.size(), 2u);
  EXPECT_EQ(replay[0].record, events[1].record);
  EXPECT_EQ(replay[1].record, events[2].record);
  EXPECT_EQ(replay[1].type, EventType::kDelete);
}

TEST_F(StoreTest, WatchFromARevisionReplaysHistoryThenLiveWithNoGapOrDuplicateUnderConcurrentWrites) {
  auto store = open();
  constexpr int kWriters = 4;
  constexpr int kPerWriter = 150;
  std::vector<std::thread> writers;
  for (int w = 0; w < kWriters; ++w) {
    writers.emplace_back([&, w] {
      for (int i = 0; i < kPerWriter; ++i) {
        auto created = store->create("jobs", fmt::format("w{}/{}", w, i), "{}");
        ASSERT_TRUE(created) << created.error().to_string();
      }
    });
  }
  // Start watching in the middle of the storm, from a revision some way back.
  auto deadline = Clock::now() + kDeadline;
  while (store->revision() < 100 && Clock::now() < deadline) std::this_thread::yield();
  int64_t from = store->revision() - 50;
  Collector collector;
  auto handle = store->watch("jobs", "", from, collector.callbacks());
  ASSERT_TRUE(handle) << handle.error().to_string();
  for (auto& writer : writers) writer.join();

  int64_t last = kWriters * kPerWriter;
  ASSERT_EQ(store->revision(), last);
  ASSERT_TRUE(collector.wait_for_revision(last));
  EXPECT_EQ(revisions_of(collector.events()), range(from + 1, last));
}

TEST_F(StoreTest, WatchFromAPrunedRevisionIsGoneNamingTheRevisionToResyncFrom) {
  auto store = open({.history_revisions = 5});
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(store->create("jobs", fmt::format("k{}", i), "{}"));
  Collector collector;
  auto gone = store->watch("jobs", "", 2, collector.callbacks());
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kGone);
  EXPECT_EQ(gone.error().value, "20");
  EXPECT_THAT(gone.error().message, HasSubstr("resync from revision 20"));

  // The last history_revisions revisions are kept.
  auto kept = store->watch("jobs", "", 15, collector.callbacks());
  ASSERT_TRUE(kept) << kept.error().to_string();
  ASSERT_TRUE(collector.wait_for_count(5));
  EXPECT_EQ(revisions_of(collector.events()), range(16, 20));
}

TEST_F(StoreTest, HistoryReturnsOneKindsChangesInTheRevisionRangeAndGoneWhenPruned) {
  auto store = open({.history_revisions = 5});
  for (int i = 0; i < 8; ++i) ASSERT_TRUE(store->create("jobs", fmt::format("k{}", i), "{}"));  // 1..8
  ASSERT_TRUE(store->create("nodes", "n", "{}"));                                                // 9
  ASSERT_TRUE(store->remove("jobs", "k7", 8));                                                   // 10
  auto events = store->history("jobs", "", 5, 10);
  ASSERT_TRUE(events) << events.error().to_string();
  EXPECT_EQ(revisions_of(*events), (std::vector<int64_t>{6, 7, 8, 10}));
  EXPECT_EQ(events->back().type, EventType::kDelete);
  EXPECT_EQ(events->back().record.key, "k7");
  auto bounded = store->history("jobs", "", 5, 7);
  ASSERT_TRUE(bounded);
  EXPECT_EQ(revisions_of(*bounded), (std::vector<int64_t>{6, 7}));
  auto prefixed = store->history("jobs", "k6", 0 + 5, 10);
  ASSERT_TRUE(prefixed);
  EXPECT_EQ(revisions_of(*prefixed), (std::vector<int64_t>{7}));

  auto gone = store->history("jobs", "", 2, 10);
  ASSERT_FALSE(gone);
  EXPECT_EQ(gone.error().code, ErrorCode::kGone);
  EXPECT_THAT(gone.error().message, HasSubstr("resync from revision 10"));
  EXPECT_EQ(store->history("jo\x01s", "", 5, 10).error().field, "kind");
}

TEST_F(StoreTest, DestroyedWatchHandleGetsNoMoreEvents) {
  auto store = open();
  Collector stopped;
  auto handle = store->watch("jobs", "", 0, stopped.callbacks());
  ASSERT_TRUE(handle);
  ASSERT_TRUE(store->create("jobs", "a", "{}"));
  ASSERT_TRUE(stopped.wait_for_count(1));
  handle->reset();

  // A later watcher sees the next writes; the notifier handles watchers in one pass per batch, so
  // by then the stopped one would have had them too.
  Collector later;
  auto later_handle = store->watch("jobs", "", 0, later.callbacks());
  ASSERT_TRUE(store->create("jobs", "b", "{}"));
  ASSERT_TRUE(store->create("jobs", "c", "{}"));
  ASSERT_TRUE(later.wait_for_count(2));
  EXPECT_EQ(stopped.events().size(), 1u);
  EXPECT_FALSE(stopped.closed());
}

TEST_F(StoreTest, WatchHandleDestroyedInsideItsOwnCallbackStopsIt) {
  auto store = open();
  std::unique_ptr<Store::WatchHandle> handle;
  std::atomic<int> calls = 0;
  auto watched = store->watch("jobs", "", 0,
                              {[&](const std::vector<Event>&) {
                                 ++calls;
                                 handle.reset();
                               },
                               nullptr});
  ASSERT_TRUE(watched);
  handle = std::move(*watched);
  ASSERT_TRUE(store->create("jobs", "a", "{}"));
  Collector later;
  auto later_handle = store->watch("jobs", "", 0, later.callbacks());
  ASSERT_TRUE(store->create("jobs", "b", "{}"));
  ASSERT_TRUE(later.wait_for_count(1));
  EXPECT_EQ(calls.load(), 1);
}

TEST_F(StoreTest, WatchHandleDestructorWaitsForARunningCallbackToReturn) {
  auto store = open();
  std::mutex mu;
  std::condition_variable cv;
  bool entered = false, release = false, finished = false;
  auto handle = store->watch("jobs", "", 0,
                             {[&](const std::vector<Event>&) {
                                std::unique_lock lock(mu);
                                entered = true;
                                cv.notify_all();
                                cv.wait(lock, [&] { return release; });
                                finished = true;
                              },
                              nullptr});
  ASSERT_TRUE(handle);
  ASSERT_TRUE(store->create("jobs", "a", "{}"));
  {
    std::unique_lock lock(mu);
    ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return entered; }));
  }
  bool finished_when_destroyed = false;
  std::thread destroyer([&] {
    handle->reset();
    std::lock_guard lock(mu);
    finished_when_destroyed = finished;
  });
  {
    std::lock_guard lock(mu);
    release = true;
    cv.notify_all();
  }
  destroyer.join();
  EXPECT_TRUE(finished_when_destroyed);
}

TEST_F(StoreTest, TxnFromAWatchCallbackIsRefusedInsteadOfDeadlocking) {
  auto store = open();
  std::mutex mu;
  std::condition_variable cv;
  std::optional<Error> refused;
  auto handle = store->watch("jobs", "", 0,
                             {[&](const std::vector<Event>&) {
                                auto result = store->create("jobs", "from-callback", "{}");
                                std::lock_guard lock(mu);
                                if (!result) refused = result.error();
                                cv.notify_all();
                              },
                              nullptr});
  ASSERT_TRUE(store->create("jobs", "a", "{}"));
  std::unique_lock lock(mu);
  ASSERT_TRUE(cv.wait_for(lock, kDeadline, [&] { return refused.has_value(); }));
  EXPECT_THAT(refused->message, HasSubstr("txn_async"));
}

// ---- Close, reopen, schema ---------------------------------------------------------------------

TEST_F(StoreTest, CloseEndsWatchesAndLaterCallsAreUnavailable) {
  auto store = open();
  Collector collector;
  auto handle = store->watch("jobs", "", 0, collector.callbacks());
  ASSERT_TRUE(handle);
  std::atomic<int> acked = 0;
  for (int i = 0; i < 50; ++i) {
    store->txn_async({Op::create("jobs", fmt::format("k{}", i), "{}")}, std::nullopt,
                     [&](Result<TxnResult> result) { acked += result ? 1 : 0; });
  }
  store->close();
  EXPECT_EQ(acked.load(), 50);  // what was queued before close() is committed
  ASSERT_TRUE(collector.wait_for_close());
  EXPECT_EQ(collector.closed()->code, ErrorCode::kUnavailable);
  EXPECT_EQ(collector.events().size(), 50u);

  EXPECT_EQ(store->create("jobs", "late", "{}").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(store->get("jobs", "k1").error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(store->list("jobs", {}).error().code, ErrorCode::kUnavailable);
  EXPECT_EQ(store->watch("jobs", "", 0, {}).error().code, ErrorCode::kUnavailable);
  store->close();
  handle->reset();
}

TEST_F(StoreTest, ReopenKeepsObjectsRevisionAndAuditChain) {
  {
    auto store = open();
    ASSERT_TRUE(store->txn({Op::create("jobs", "a", R"({"v":1})")}, R"({"n":1})"));
    ASSERT_TRUE(store->txn({Op::create("nodes", "n", "{}")}, R"({"n":2})"));
  }
  auto store = open();
  EXPECT_EQ(store->revision(), 2);
  EXPECT_EQ(store->get("jobs", "a")->value, R"({"v":1})");
  auto third = store->txn({Op::update("jobs", "a", R"({"v":2})", 1)}, R"({"n":3})");
  ASSERT_TRUE(third);
  EXPECT_EQ(third->revision, 3);
  auto audit = store->audit_log(1, 100);
  ASSERT_EQ(audit->size(), 3u);
  expect_intact_chain(*audit);
  // Watching from before the reopen replays the history written before it.
  Collector replay;
  auto replay_handle = store->watch("jobs", "", 1, replay.callbacks());
  ASSERT_TRUE(replay_handle) << replay_handle.error().to_string();
  ASSERT_TRUE(replay.wait_for_count(1));
  EXPECT_EQ(revisions_of(replay.events()), std::vector<int64_t>{3});
}

TEST_F(StoreTest, DatabaseFromANewerSchemaVersionIsRefusedAndLeftUntouched) {
  std::string path = dir_.file("cnlab.db");
  ASSERT_TRUE(open({.path = path}));
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  ASSERT_EQ(sqlite3_exec(db, "PRAGMA user_version = 99", nullptr, nullptr, nullptr), SQLITE_OK);
  sqlite3_close(db);

  auto refused = open_sqlite_store({.path = path});
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().code, ErrorCode::kFailedPrecondition);
  EXPECT_THAT(refused.error().message, HasSubstr("schema version 99"));

  ASSERT_EQ(sqlite3_open(path.c_str(), &db), SQLITE_OK);
  sqlite3_stmt* stmt = nullptr;
  ASSERT_EQ(sqlite3_prepare_v2(db, "PRAGMA user_version", -1, &stmt, nullptr), SQLITE_OK);
  ASSERT_EQ(sqlite3_step(stmt), SQLITE_ROW);
  EXPECT_EQ(sqlite3_column_int64(stmt, 0), 99);
  sqlite3_finalize(stmt);
  sqlite3_close(db);
}

TEST_F(StoreTest, SecondOpenOfAnOpenStoreIsRefused) {
  auto store = open();
  auto second = open_sqlite_store({.path = dir_.file("state/cnlab.db")});
  ASSERT_FALSE(second);
  EXPECT_EQ(second.error().code, ErrorCode::kUnavailable);
  store.reset();
  EXPECT_TRUE(open());
}

// ---- Audit -------------------------------------------------------------------------------------

TEST_F(StoreTest, AuditChainHashesAreSha256OfPreviousHashNewlineRecord) {
  auto store = open();
  std::vector<std::string> records = {R"({"who":"alice","what":"create job a"})",
                                      R"({"who":"bob","what":"create job b"})", R"({"who":"carol","what":"login"})"};
  ASSERT_TRUE(store->txn({Op::create("jobs", "a", "{}")}, records[0]));
  ASSERT_FALSE(store->txn({Op::create("jobs", "a", "{}")}, R"({"who":"mallory"})"));  // fails: not audited
  ASSERT_TRUE(store->txn({Op::create("jobs", "b", "{}")}, records[1]));
  ASSERT_TRUE(store->txn({}, records[2]));
  EXPECT_EQ(store->txn({}, "not json").error().field, "audit");

  auto audit = store->audit_log(1, 100);
  ASSERT_TRUE(audit);
  ASSERT_EQ(audit->size(), 3u);
  for (size_t i = 0; i < records.size(); ++i) {
    EXPECT_EQ((*audit)[i].record, records[i]);
    EXPECT_EQ((*audit)[i].revision, static_cast<int64_t>(i + 1));
  }
  EXPECT_EQ((*audit)[0].prev_hash, std::string(64, '0'));
  EXPECT_EQ((*audit)[0].hash, sha256_hex(std::string(64, '0') + "\n" + records[0]));
  expect_intact_chain(*audit);

  auto tail = store->audit_log(2, 1);
  ASSERT_EQ(tail->size(), 1u);
  EXPECT_EQ((*tail)[0].seq, 2);
  EXPECT_EQ((*tail)[0].record, records[1]);
}

// ---- Crash safety ------------------------------------------------------------------------------

// Runs store_crash_writer on `db` until it has acknowledged `acks` transactions, kills it with
// SIGKILL, and returns every id it acknowledged (including lines still in the pipe).
std::vector<std::string> run_and_kill_writer(const std::string& db, const std::string& tag, size_t acks) {
  int pipe_fds[2];
  CNLAB_CHECK(::pipe2(pipe_fds, O_CLOEXEC) == 0);
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, pipe_fds[1], 1);
  std::string threads = "16";
  std::vector<char*> argv = {const_cast<char*>(CNLAB_STORE_CRASH_WRITER), const_cast<char*>(db.c_str()),
                             const_cast<char*>(tag.c_str()), threads.data(), nullptr};
  pid_t pid = 0;
  int rc = posix_spawn(&pid, CNLAB_STORE_CRASH_WRITER, &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  ::close(pipe_fds[1]);
  EXPECT_EQ(rc, 0) << "cannot start " << CNLAB_STORE_CRASH_WRITER;
  if (rc != 0) return {};

  std::vector<std::string> acked;
  std::string buffer;
  auto take_lines = [&] {
    size_t start = 0;
    for (size_t end; (end = buffer.find('\n', start)) != std::string::npos; start = end + 1) {
      acked.push_back(buffer.substr(start, end - start));
    }
    buffer.erase(0, start);
  };
  bool killed = false;
  auto deadline = Clock::now() + kDeadline;
  char chunk[4096];
  while (true) {
    if (!killed && (acked.size() >= acks || Clock::now() > deadline)) {
      ::kill(pid, SIGKILL);  // mid-storm: 16 threads are committing right now
      killed = true;
    }
    pollfd fd{pipe_fds[0], POLLIN, 0};
    if (::poll(&fd, 1, 1000) <= 0) continue;
    ssize_t n = ::read(pipe_fds[0], chunk, sizeof chunk);
    if (n <= 0) break;  // EOF: the writer is dead and everything it printed is read
    buffer.append(chunk, static_cast<size_t>(n));
    take_lines();
  }
  ::close(pipe_fds[0]);
  int status = 0;
  ::waitpid(pid, &status, 0);
  EXPECT_TRUE(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL) << "the writer ended by itself: " << status;
  EXPECT_GE(acked.size(), acks);
  return acked;
}

TEST_F(StoreTest, KillNineLosesNoAcknowledgedWriteAndLeavesNoTxnHalfApplied) {
  std::string db = dir_.file("crash/cnlab.db");
  std::vector<std::string> acked;
  for (std::string tag : {"r0", "r1", "r2"}) {
    auto round = run_and_kill_writer(db, tag, 300);
    acked.insert(acked.end(), round.begin(), round.end());
  }
  ASSERT_FALSE(HasFailure());

  auto store = open({.path = db});
  ASSERT_TRUE(store);
  int64_t revision = store->revision();
  auto pairs = store->list("crash", {});
  ASSERT_TRUE(pairs);
  std::map<std::string, std::vector<Record>> by_txn;  // "r0-3-17" -> its -a and -b records
  for (Record& record : pairs->items) {
    std::string id = record.key.substr(0, record.key.size() - 2);
    by_txn[id].push_back(std::move(record));
  }
  // Every acknowledged transaction is there.
  for (const std::string& id : acked) EXPECT_TRUE(by_txn.contains(id)) << "lost acknowledged txn " << id;
  // Every transaction there is whole: both keys at the same revision; each revision is one txn.
  std::set<int64_t> revisions;
  for (const auto& [id, records] : by_txn) {
    ASSERT_EQ(records.size(), 2u) << "half-applied txn " << id;
    EXPECT_EQ(records[0].mod_revision, records[1].mod_revision) << id;
    EXPECT_TRUE(revisions.insert(records[0].mod_revision).second) << id;
  }
  std::vector<int64_t> all = range(1, revision);
  EXPECT_EQ(revisions, std::set<int64_t>(all.begin(), all.end()))
      << "the revision counter and the committed transactions disagree";
  // Each thread's counter matches the number of its transactions present, and they are 0..n-1.
  auto counters = store->list("counters", {});
  ASSERT_TRUE(counters);
  size_t counted = 0;
  for (const Record& counter : counters->items) {
    int64_t n = nlohmann::json::parse(counter.value)["n"].get<int64_t>();
    counted += static_cast<size_t>(n);
    for (int64_t j = 0; j < n; ++j) EXPECT_TRUE(by_txn.contains(fmt::format("{}-{}", counter.key, j)));
    EXPECT_FALSE(by_txn.contains(fmt::format("{}-{}", counter.key, n))) << counter.key;
  }
  EXPECT_EQ(counted, by_txn.size());
  // The audit chain holds one entry per transaction, intact.
  auto audit = store->audit_log(1, 1'000'000);
  ASSERT_TRUE(audit);
  EXPECT_EQ(static_cast<int64_t>(audit->size()), revision);
  expect_intact_chain(*audit);
  for (const AuditEntry& entry : *audit) EXPECT_EQ(entry.revision, entry.seq);
}

}  // namespace
}  // namespace cnlab::store

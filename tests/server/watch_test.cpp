// Watch streams: changes after a revision as JSON lines, filtered per caller; 410 with the revision
// to resync from when the asked revision is older than the kept history.
#include <gmock/gmock.h>

#include <atomic>
#include <mutex>
#include <set>
#include <thread>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

class WatchTest : public ClusterTest {
 protected:
  void SetUp() override { start_server({"--history-revisions", "50"}); }
};

TEST_F(WatchTest, AWatchFromARevisionSeesEveryLaterChangeOnceAndInOrder) {
  register_node("gpu-1", "h100", 8);
  Json listed = call(*admin_, "GET", "/v1/jobs", 200);
  int64_t revision = listed["revision"];
  std::vector<std::string> ids;
  for (int i = 0; i < 3; ++i) ids.push_back(call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-10"))["metadata"]["name"]);

  auto watcher = server_->client(server_->admin_token());
  std::string buffer;
  std::vector<Json> events;
  (void)watcher->stream("GET", "/v1/jobs?watch=1&revision=" + std::to_string(revision), [&](std::string_view chunk) {
    buffer += chunk;
    for (size_t nl; (nl = buffer.find('\n')) != std::string::npos;) {
      events.push_back(Json::parse(buffer.substr(0, nl)));
      buffer.erase(0, nl + 1);
    }
    // Three ADDED, and the scheduler binds each (MODIFIED).
    int added = 0;
    for (const auto& e : events) added += e["type"] == "ADDED";
    return added < 3;
  });
  // In revision order; one transaction (the scheduler binding several jobs) shares a revision,
  // but no object's change arrives twice.
  std::vector<std::string> added;
  std::set<std::pair<std::string, int64_t>> seen;
  int64_t last = 0;
  for (const auto& e : events) {
    int64_t r = e["object"]["metadata"]["revision"];
    EXPECT_GE(r, last);
    last = r;
    EXPECT_TRUE(seen.emplace(e["object"]["metadata"]["name"], r).second) << "twice: " << e.dump();
    if (e["type"] == "ADDED") added.push_back(e["object"]["metadata"]["name"]);
  }
  EXPECT_EQ(added, ids);
}

TEST_F(WatchTest, AnOldRevisionGets410WithTheRevisionToResyncFrom) {
  for (int i = 0; i < 60; ++i) call(*admin_, "POST", "/v1/users", 201, {{"metadata", {{"name", "user" + std::to_string(i)}}}});
  auto r = admin_->request("GET", "/v1/jobs?watch=1&revision=1");
  ASSERT_EQ(r->status, 410);
  Json error = Json::parse(r->body)["error"];
  EXPECT_EQ(error["code"], "gone");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("resync from revision"));
}

TEST_F(WatchTest, AMemberWatchingJobsSeesOnlyTheirProjects) {
  register_node("gpu-1", "h100", 8);
  create_project("vision");
  create_project("nlp");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  int64_t revision = call(*alice, "GET", "/v1/jobs", 200)["revision"];
  call(*bob, "POST", "/v1/jobs", 201, job_body("nlp", "h100-10"));
  std::string mine = call(*alice, "POST", "/v1/jobs", 201, job_body("vision", "h100-10"))["metadata"]["name"];
  std::string seen;
  (void)alice->stream("GET", "/v1/jobs?watch=1&revision=" + std::to_string(revision), [&](std::string_view chunk) {
    seen += chunk;
    return seen.find(mine) == std::string::npos;
  });
  EXPECT_EQ(seen.find("\"nlp\""), std::string::npos);
  EXPECT_NE(seen.find(mine), std::string::npos);
}


// A node's agent watches with its credential: it hears of the jobs bound to its node, never of
// another node's, and hears DELETED when one leaves it (here: the node goes silent and is Lost).
TEST_F(WatchTest, ANodesWatchSeesOnlyItsOwnJobsAndHearsWhenOneLeaves) {
  server_->stop(SIGTERM);
  start_server({"--not-ready-after", "1s", "--lost-after", "2s"});
  std::string silent = register_node("gpu-1", "h100", 8);
  std::string alive = register_node("gpu-2", "h100", 8);
  std::atomic<bool> done{false};
  std::thread heartbeats([&] {
    auto agent = server_->client(alive);
    while (!done) {
      (void)agent->request("PUT", "/v1/nodes/gpu-2/heartbeat", node_object("gpu-2", "h100", 8).dump());
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
    }
  });
  struct Seen {
    std::mutex mutex;
    std::string text;
  };
  auto watch = [&](const std::string& credential, Seen& seen, const std::string& until) {
    // A missing event ends the stream by the client's read timeout, not by hanging the test.
    auto connected = net::Client::connect({server_->url(), server_->ca(), credential, std::chrono::seconds(20)});
    if (!connected) throw std::runtime_error(connected.error().to_string());
    std::shared_ptr<net::Client> agent = std::move(*connected);
    int64_t revision = call(*agent, "GET", "/v1/jobs", 200)["revision"];
    return std::thread([agent, revision, &seen, until, &done] {
      (void)agent->stream("GET", "/v1/jobs?watch=1&revision=" + std::to_string(revision), [&](std::string_view chunk) {
        std::lock_guard lock(seen.mutex);
        seen.text += chunk;
        return !done && seen.text.find(until) == std::string::npos;
      });
    });
  };
  Seen on_silent, on_alive;
  std::thread w1 = watch(silent, on_silent, "\"DELETED\"");
  std::thread w2 = watch(alive, on_alive, "never");
  std::string a = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x8"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, a, "Scheduled"));
  std::string b = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x8"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, b, "Scheduled"));
  std::string node_a = get_job(*admin_, a)["status"]["placement"][0]["node"];
  if (node_a == "gpu-2") std::swap(a, b);  // `a` is the job on the silent node
  // gpu-1 goes Lost: its job is requeued (gpu-2 is full), and gpu-1's watch hears it leave.
  ASSERT_TRUE(eventually([&] { return call(*admin_, "GET", "/v1/nodes/gpu-1", 200)["status"]["phase"] == "Lost"; },
                         std::chrono::seconds(15)));
  ASSERT_TRUE(wait_for_phase(*admin_, a, "Pending"));
  w1.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  done = true;
  (void)call(*admin_, "POST", "/v1/jobs/" + b + "/cancel", 200);  // one more event ends gpu-2's stream
  w2.join();
  heartbeats.join();
  EXPECT_NE(on_silent.text.find(a), std::string::npos);
  EXPECT_EQ(on_silent.text.find(b), std::string::npos) << "gpu-1's watch saw gpu-2's job";
  EXPECT_NE(on_silent.text.find("\"DELETED\""), std::string::npos);
  EXPECT_NE(on_alive.text.find(b), std::string::npos);
  EXPECT_EQ(on_alive.text.find(a), std::string::npos) << "gpu-2's watch saw gpu-1's job";
}

}  // namespace
}  // namespace cnlab::server::test_support

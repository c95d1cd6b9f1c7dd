// Watch streams: changes after a revision as JSON lines, filtered per caller; 410 with the revision
// to resync from when the asked revision is older than the kept history.
#include <gmock/gmock.h>

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
  std::vector<std::string> added;
  int64_t last = 0;
  for (const auto& e : events) {
    int64_t r = e["object"]["metadata"]["revision"];
    EXPECT_GT(r, last);
    last = r;
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

}  // namespace
}  // namespace cnlab::server::test_support

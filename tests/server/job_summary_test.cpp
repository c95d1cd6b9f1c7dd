// GET /v1/jobs?view=summary: what `cnlab ps` shows of each job, read from the server's cache. The
// same jobs, visibility and filters as the full view, in a fraction of the bytes.
#include <gmock/gmock.h>

#include <map>
#include <set>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;
using ::testing::UnorderedElementsAre;

class JobSummaryTest : public ClusterTest {
 protected:
  static std::vector<std::string> names(const Json& list) {
    std::vector<std::string> out;
    for (const auto& item : list["items"]) out.push_back(item["name"]);
    return out;
  }
  Json summary(net::Client& client, const std::string& query = "") {
    return call(client, "GET", "/v1/jobs?view=summary" + query, 200);
  }
  std::string submit(net::Client& client, const std::string& project, const std::string& gpu) {
    return call(client, "POST", "/v1/jobs", 201, job_body(project, gpu))["metadata"]["name"];
  }
};

TEST_F(JobSummaryTest, ItemsSayWhatTheFullViewSaysOfTheSameJobs) {
  std::string credential = register_node("gpu-1", "l4", 1);
  auto agent = server_->client(credential);
  std::string failed = submit(*admin_, "default", "l4");
  ASSERT_TRUE(wait_for_phase(*admin_, failed, "Scheduled"));
  call(*agent, "PUT", "/v1/jobs/" + failed + "/status", 200, {{"phase", "Running"}});
  call(*agent, "PUT", "/v1/jobs/" + failed + "/status", 200, {{"phase", "Failed"}, {"exit_code", 3}});
  std::string bound = submit(*admin_, "default", "l4");
  ASSERT_TRUE(wait_for_phase(*admin_, bound, "Scheduled"));
  std::string waiting = submit(*admin_, "default", "l4");
  ASSERT_TRUE(eventually([&] { return get_job(*admin_, waiting)["status"].value("queue_position", 0) == 1; }));

  Json brief = summary(*admin_);
  Json full = call(*admin_, "GET", "/v1/jobs", 200);
  ASSERT_EQ(brief["items"].size(), 3u) << brief.dump();
  ASSERT_EQ(full["items"].size(), 3u);
  std::map<std::string, Json> by_name;
  for (const auto& job : full["items"]) by_name[job["metadata"]["name"]] = job;
  for (const auto& item : brief["items"]) {
    const Json& job = by_name.at(item["name"]);
    SCOPED_TRACE(item.dump());
    EXPECT_EQ(item["project"], job["spec"]["project"]);
    EXPECT_EQ(item["user"], job["spec"]["user"]);
    EXPECT_EQ(item["gpu"], job["spec"]["gpu"]);
    EXPECT_EQ(item["priority_class"], job["spec"]["priority_class"]);
    EXPECT_EQ(item["phase"], job["status"]["phase"]);
    Json nodes = Json::array();
    for (const auto& b : job["status"].value("placement", Json::array())) nodes.push_back(b["node"]);
    EXPECT_EQ(item["nodes"], nodes);
    for (const char* key : {"submitted_at", "started_at", "finished_at", "exit_code", "signal", "queue_position"}) {
      EXPECT_EQ(item.value(key, Json()), job["status"].value(key, Json())) << key;
    }
  }
  std::map<std::string, Json> items;
  for (const auto& item : brief["items"]) items[item["name"]] = item;
  EXPECT_EQ(items[failed]["phase"], "Failed");
  EXPECT_EQ(items[failed]["exit_code"], 3);
  EXPECT_EQ(items[bound]["nodes"], Json::array({"gpu-1"}));
  EXPECT_EQ(items[waiting]["queue_position"], 1);
  EXPECT_FALSE(items[waiting].contains("started_at"));
  // Sorted by name, and the revision is one a watch can start from.
  std::vector<std::string> sorted = names(brief);
  std::sort(sorted.begin(), sorted.end());
  EXPECT_EQ(names(brief), sorted);
  EXPECT_GT(brief["revision"].get<int64_t>(), 0);
}

TEST_F(JobSummaryTest, AUserSeesOnlyTheirProjectsJobsAndANodeOnlyItsOwn) {
  create_project("vision");
  create_project("nlp");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  auto gpu1 = server_->client(register_node("gpu-1", "l4", 1));
  register_node("gpu-2", "l4", 1);
  std::string a = submit(*alice, "vision", "l4");
  std::string b = submit(*alice, "vision", "l4");
  ASSERT_TRUE(wait_for_phase(*admin_, a, "Scheduled"));
  ASSERT_TRUE(wait_for_phase(*admin_, b, "Scheduled"));

  EXPECT_THAT(names(summary(*alice)), UnorderedElementsAre(a, b));
  EXPECT_THAT(names(summary(*bob)), IsEmpty());
  EXPECT_EQ(bob->request("GET", "/v1/jobs?view=summary&project=vision")->status, 404);
  EXPECT_THAT(names(summary(*admin_)), UnorderedElementsAre(a, b));

  Json mine = summary(*gpu1);
  ASSERT_EQ(mine["items"].size(), 1u) << mine.dump();
  EXPECT_EQ(mine["items"][0]["nodes"], Json::array({"gpu-1"}));
  EXPECT_EQ(names(mine), names(call(*admin_, "GET", "/v1/jobs?view=summary&node=gpu-1", 200)));
  EXPECT_EQ(gpu1->request("GET", "/v1/jobs?view=summary&node=gpu-2")->status, 403);
}

TEST_F(JobSummaryTest, PhaseUserAndLabelFiltersSelectAsInTheFullView) {
  create_project("vision");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto carol = server_->client(token_for("carol", "vision", "member"));
  register_node("gpu-1", "l4", 1);
  std::string first = submit(*alice, "vision", "l4");
  ASSERT_TRUE(wait_for_phase(*admin_, first, "Scheduled"));
  std::string second = submit(*alice, "vision", "l4");
  std::string carols = submit(*carol, "vision", "l4");

  EXPECT_THAT(names(summary(*alice, "&fieldSelector=spec.user%3Dalice")), UnorderedElementsAre(first, second));
  EXPECT_THAT(names(summary(*alice, "&fieldSelector=spec.user%21%3Dalice")), ElementsAre(carols));
  EXPECT_THAT(names(summary(*alice, "&phase=Pending")), UnorderedElementsAre(second, carols));
  EXPECT_THAT(names(summary(*alice, "&fieldSelector=status.phase%3DScheduled%2Cspec.project%3Dvision")),
              ElementsAre(first));
  EXPECT_THAT(names(summary(*alice, "&phase=Pending&fieldSelector=spec.user%3Dcarol")), ElementsAre(carols));
  // job_body names every job "train": submit labels it cnlab.io/name=train.
  EXPECT_EQ(summary(*alice, "&labelSelector=cnlab.io%2Fname%3Dtrain")["items"].size(), 3u);
  EXPECT_THAT(names(summary(*alice, "&labelSelector=cnlab.io%2Fname%3Dother")), IsEmpty());
}

TEST_F(JobSummaryTest, AJobBeingMovedOrCancelledSaysSo) {
  auto node_1 = server_->client(register_peer("gpu-1"));
  auto node_2 = server_->client(register_peer("gpu-2"));
  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  const std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  const std::string from = get_job(*admin_, id)["status"]["placement"][0]["node"];
  call(from == "gpu-1" ? *node_1 : *node_2, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
  auto item = [&] {
    const Json list = summary(*admin_);
    for (const auto& it : list["items"]) {
      if (it["name"] == id) return it;
    }
    return Json::object();
  };
  EXPECT_FALSE(item().contains("moving_to")) << item().dump();
  EXPECT_FALSE(item().contains("cancelling"));

  const std::string to = from == "gpu-1" ? "gpu-2" : "gpu-1";
  call(*admin_, "POST", "/v1/jobs/" + id + "/migrate", 202, {{"to", to}});
  EXPECT_EQ(item().value("moving_to", "?"), to) << item().dump();
  call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200);
  EXPECT_EQ(item().value("cancelling", false), true) << item().dump();
  EXPECT_EQ(item()["phase"], "Running");
}

TEST_F(JobSummaryTest, AnUnsupportedSelectorOrPagingIsRefusedSayingWhatIsAllowed) {
  auto refused = admin_->request("GET", "/v1/jobs?view=summary&fieldSelector=spec.gpu%3Dl4");
  ASSERT_EQ(refused->status, 400);
  Json error = Json::parse(refused->body)["error"];
  EXPECT_EQ(error["field"], "fieldSelector");
  EXPECT_EQ(error["value"], "spec.gpu");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("spec.user, spec.project and status.phase"));
  EXPECT_EQ(admin_->request("GET", "/v1/jobs?view=summary&limit=10")->status, 400);
  EXPECT_EQ(admin_->request("GET", "/v1/jobs?view=summary&watch=1")->status, 400);
  auto unknown_view = admin_->request("GET", "/v1/jobs?view=compact");
  EXPECT_EQ(unknown_view->status, 400);
  EXPECT_THAT(unknown_view->body, HasSubstr("summary"));
}

TEST_F(JobSummaryTest, AJobIsListedAsSoonAsItsSubmitReturns) {
  register_node("gpu-1", "l4", 1);
  std::set<std::string> submitted;
  for (int i = 0; i < 20; ++i) {
    std::string id = submit(*admin_, "default", "l4");
    submitted.insert(id);
    std::vector<std::string> listed = names(summary(*admin_));
    ASSERT_EQ(std::set<std::string>(listed.begin(), listed.end()), submitted) << "after submitting " << id;
  }
}

}  // namespace
}  // namespace cnlab::server::test_support

// Gang jobs through the API: one job placed on several nodes, one member process per node, each
// node's agent reporting to the same job and shipping lines to the same log.
#include <gmock/gmock.h>

#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>
#include <tuple>

#include "fixtures.h"
#include "server/job_logs.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::ElementsAre;

class GangTest : public ClusterTest {
 protected:
  // Two nodes of 8 H100 and a job of 16 bound across both; returns the job's id.
  std::string bind_gang() {
    credentials_["gpu-1"] = register_node("gpu-1", "h100", 8);
    credentials_["gpu-2"] = register_node("gpu-2", "h100", 8);
    connect_agents();
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x16"))["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    return id;
  }

  // (Again, after a restart: the server listens on a new port.)
  void connect_agents() {
    for (const auto& [node, credential] : credentials_) agents_[node] = server_->client(credential);
  }

  Json report(const std::string& node, const std::string& id, int status, const Json& body) {
    return call(*agents_.at(node), "PUT", "/v1/jobs/" + id + "/status", status, body);
  }

  // POSTs lines numbered by the agent of `node`: {seq, text}.
  Json ship(const std::string& node, const std::string& id, const std::vector<std::pair<int, std::string>>& lines) {
    Json body = {{"lines", Json::array()}};
    for (const auto& [seq, text] : lines) body["lines"].push_back({{"seq", seq}, {"stream", "stdout"}, {"text", text}});
    return call(*agents_.at(node), "POST", "/v1/jobs/" + id + "/logs", 200, body);
  }

  // The stored log as (seq, node, text).
  std::vector<std::tuple<int64_t, std::string, std::string>> log_of(const std::string& id, int64_t from_seq = 0) {
    auto r = admin_->request("GET", "/v1/jobs/" + id + "/logs?from_seq=" + std::to_string(from_seq));
    EXPECT_EQ(r->status, 200);
    std::vector<std::tuple<int64_t, std::string, std::string>> out;
    std::istringstream in(r->body);
    std::string text;
    while (std::getline(in, text)) {
      Json line = Json::parse(text);
      out.emplace_back(line["seq"].get<int64_t>(), line["node"].get<std::string>(), line["text"].get<std::string>());
    }
    return out;
  }

  // Binds a second gang of 16: it fits only once the first one freed the GPUs of both nodes.
  bool gpus_freed() {
    std::string next = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x16"))["metadata"]["name"];
    return wait_for_phase(*admin_, next, "Scheduled");
  }

  std::map<std::string, std::string> credentials_;
  std::map<std::string, std::unique_ptr<net::Client>> agents_;
};

using Line = std::tuple<int64_t, std::string, std::string>;

TEST_F(GangTest, TheJobRunsUntilEveryMemberReportsSucceeded) {
  std::string id = bind_gang();
  Json bound = get_job(*admin_, id);
  ASSERT_EQ(bound["status"]["placement"].size(), 2u);
  std::set<std::string> nodes = {bound["status"]["placement"][0]["node"], bound["status"]["placement"][1]["node"]};
  EXPECT_THAT(nodes, ElementsAre("gpu-1", "gpu-2"));

  EXPECT_EQ(report("gpu-1", id, 200, {{"phase", "Running"}})["status"]["phase"], "Running");
  Json running = report("gpu-2", id, 200, {{"phase", "Running"}});
  EXPECT_EQ(running["status"]["attempts"], 1);

  Json one = report("gpu-1", id, 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  EXPECT_EQ(one["status"]["phase"], "Running");
  EXPECT_EQ(one["status"]["succeeded_nodes"], Json({"gpu-1"}));
  EXPECT_FALSE(one["status"].contains("finished_at"));

  Json both = report("gpu-2", id, 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  EXPECT_EQ(both["status"]["phase"], "Succeeded");
  EXPECT_EQ(both["status"]["exit_code"], 0);
  EXPECT_EQ(both["status"]["succeeded_nodes"], Json({"gpu-1", "gpu-2"}));
  EXPECT_EQ(both["status"]["events"].back()["reason"], "Succeeded, exit code 0");
  std::vector<std::string> events;
  for (const auto& e : both["status"]["events"]) events.push_back(e["type"]);
  EXPECT_THAT(events, ElementsAre("Queued", "Scheduled", "Started", "Finished"));
  EXPECT_TRUE(gpus_freed());
}

TEST_F(GangTest, ARepeatedReportFromOneMemberChangesNothing) {
  std::string id = bind_gang();
  report("gpu-1", id, 200, {{"phase", "Running"}});
  Json first = report("gpu-1", id, 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  Json again = report("gpu-1", id, 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  EXPECT_EQ(again["metadata"]["revision"], first["metadata"]["revision"]);
  EXPECT_EQ(again["status"], first["status"]);
  EXPECT_EQ(again["status"]["phase"], "Running");
  EXPECT_EQ(again["status"]["succeeded_nodes"], Json({"gpu-1"}));
  // The other member's Running is no news either.
  Json other = report("gpu-2", id, 200, {{"phase", "Running"}});
  EXPECT_EQ(other["metadata"]["revision"], first["metadata"]["revision"]);
}

TEST_F(GangTest, OneMembersFailureEndsTheJobAtOnceNamingTheNode) {
  std::string id = bind_gang();
  report("gpu-1", id, 200, {{"phase", "Running"}});
  report("gpu-2", id, 200, {{"phase", "Running"}});
  report("gpu-1", id, 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  Json failed = report("gpu-2", id, 200, {{"phase", "Failed"}, {"exit_code", 3}});
  EXPECT_EQ(failed["status"]["phase"], "Failed");
  EXPECT_EQ(failed["status"]["exit_code"], 3);
  EXPECT_EQ(failed["status"]["message"], "gpu-2: exit code 3");
  EXPECT_EQ(failed["status"]["events"].back()["reason"], "Failed on gpu-2, exit code 3");
  EXPECT_TRUE(failed["status"].contains("finished_at"));

  // The job is over for every member: later reports are refused, and nothing changes.
  auto late = agents_.at("gpu-1")->request("PUT", "/v1/jobs/" + id + "/status", Json{{"phase", "Succeeded"}}.dump());
  EXPECT_EQ(late->status, 409) << late->body;
  EXPECT_EQ(agents_.at("gpu-2")->request("PUT", "/v1/jobs/" + id + "/status", Json{{"phase", "Failed"}}.dump())->status,
            409);
  EXPECT_EQ(get_job(*admin_, id)["metadata"]["revision"], failed["metadata"]["revision"]);
  EXPECT_TRUE(gpus_freed());
}

TEST_F(GangTest, AMembersFailureAfterACancelEndsItCancelledWithTheAgentsMessage) {
  std::string id = bind_gang();
  report("gpu-1", id, 200, {{"phase", "Running"}});
  call(*admin_, "POST", "/v1/jobs/" + id + "/cancel", 200, Json::object());
  Json ended = report("gpu-1", id, 200, {{"phase", "Failed"}, {"signal", 15}, {"message", "stopped"}});
  EXPECT_EQ(ended["status"]["phase"], "Cancelled");
  EXPECT_EQ(ended["status"]["signal"], 15);
  EXPECT_EQ(ended["status"]["message"], "gpu-1: stopped");
}

TEST_F(GangTest, AOneNodeJobStillEndsOnItsFirstReportWithTheMessageAsSent) {
  auto agent = server_->client(register_node("gpu-1", "h100", 8));
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100x8"))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  Json done = call(*agent, "PUT", "/v1/jobs/" + id + "/status", 200,
                   {{"phase", "Succeeded"}, {"exit_code", 0}, {"message", "done"}});
  EXPECT_EQ(done["status"]["phase"], "Succeeded");
  EXPECT_EQ(done["status"]["message"], "done");
  EXPECT_FALSE(done["status"].contains("succeeded_nodes"));
}

TEST_F(GangTest, LogsOfBothMembersAreKeptNumberedByTheServerAndResendsAreSkippedPerNode) {
  std::string id = bind_gang();
  EXPECT_EQ(ship("gpu-1", id, {{1, "a1"}, {2, "a2"}}), Json({{"last_seq", 2}, {"last_node_seq", 2}}));
  // gpu-2 counts from 1 too: its lines are its own, not resends of gpu-1's.
  EXPECT_EQ(ship("gpu-2", id, {{1, "b1"}, {2, "b2"}, {3, "b3"}}), Json({{"last_seq", 5}, {"last_node_seq", 3}}));
  // Resends after a reconnect: only what each node had not shipped yet is stored.
  EXPECT_EQ(ship("gpu-1", id, {{2, "a2"}, {3, "a3"}}), Json({{"last_seq", 6}, {"last_node_seq", 3}}));
  EXPECT_EQ(ship("gpu-2", id, {{1, "b1"}, {2, "b2"}, {3, "b3"}}), Json({{"last_seq", 6}, {"last_node_seq", 3}}));

  EXPECT_THAT(log_of(id), ElementsAre(Line{1, "gpu-1", "a1"}, Line{2, "gpu-1", "a2"}, Line{3, "gpu-2", "b1"},
                                      Line{4, "gpu-2", "b2"}, Line{5, "gpu-2", "b3"}, Line{6, "gpu-1", "a3"}));
  EXPECT_THAT(log_of(id, 5), ElementsAre(Line{5, "gpu-2", "b3"}, Line{6, "gpu-1", "a3"}));
}

TEST_F(GangTest, AFollowerGetsEveryMembersLinesOnceInTheServersOrder) {
  std::string id = bind_gang();
  ship("gpu-1", id, {{1, "a1"}, {2, "a2"}});
  ship("gpu-2", id, {{1, "b1"}});
  auto follower = server_->client(server_->admin_token());
  std::string seen;
  std::mutex mutex;
  std::thread reader([&] {
    (void)follower->stream("GET", "/v1/jobs/" + id + "/logs?follow=1&from_seq=2", [&](std::string_view chunk) {
      std::lock_guard lock(mutex);
      seen += chunk;
      return seen.find("\"b3\"") == std::string::npos;
    });
  });
  ASSERT_TRUE(eventually([&] {
    std::lock_guard lock(mutex);
    return seen.find("\"b1\"") != std::string::npos;
  }));
  ship("gpu-1", id, {{2, "a2"}, {3, "a3"}});
  ship("gpu-2", id, {{1, "b1"}, {2, "b2"}});
  ship("gpu-2", id, {{3, "b3"}});
  reader.join();
  std::vector<std::pair<int64_t, std::string>> got;
  std::istringstream in(seen);
  std::string text;
  while (std::getline(in, text)) {
    Json line = Json::parse(text);
    got.emplace_back(line["seq"].get<int64_t>(), line["text"].get<std::string>());
  }
  using Seen = std::pair<int64_t, std::string>;
  EXPECT_THAT(got, ElementsAre(Seen{2, "a2"}, Seen{3, "b1"}, Seen{4, "a3"}, Seen{5, "b2"}, Seen{6, "b3"}));
}

TEST_F(GangTest, ResendsAfterTheServerCrashedAndRestartedStoreNothingTwice) {
  std::string id = bind_gang();
  ship("gpu-1", id, {{1, "a1"}, {2, "a2"}});
  ship("gpu-2", id, {{1, "b1"}, {2, "b2"}});
  server_->stop(SIGKILL);
  start_server({});
  connect_agents();

  // Both agents resend all they had; gpu-1 has one new line.
  EXPECT_EQ(ship("gpu-2", id, {{1, "b1"}, {2, "b2"}}), Json({{"last_seq", 4}, {"last_node_seq", 2}}));
  EXPECT_EQ(ship("gpu-1", id, {{1, "a1"}, {2, "a2"}, {3, "a3"}}), Json({{"last_seq", 5}, {"last_node_seq", 3}}));
  EXPECT_THAT(log_of(id), ElementsAre(Line{1, "gpu-1", "a1"}, Line{2, "gpu-1", "a2"}, Line{3, "gpu-2", "b1"},
                                      Line{4, "gpu-2", "b2"}, Line{5, "gpu-1", "a3"}));
}

// JobLogs in process, for what the API cannot reach cheaply: a small size limit and a torn file.
class JobLogsTest : public ::testing::Test {
 protected:
  static std::vector<LogLine> lines(std::initializer_list<std::pair<int64_t, std::string>> numbered) {
    std::vector<LogLine> out;
    for (const auto& [node_seq, text] : numbered) out.push_back({0, "", node_seq, "stdout", "", text});
    return out;
  }
  std::string path(const std::string& job) const { return dir_.path() + "/" + job + ".jsonl"; }

  TempDir dir_;
};

TEST_F(JobLogsTest, PastTheLimitABatchIsRefusedAsTooLargeButAResendIsStillAnswered) {
  JobLogs logs(dir_.path(), 300);
  auto first = logs.append("j", "gpu-1", lines({{1, "x"}, {2, "y"}}));
  ASSERT_TRUE(first) << first.error().to_string();
  auto over = logs.append("j", "gpu-2", lines({{1, std::string(300, 'z')}}));
  ASSERT_FALSE(over);
  EXPECT_EQ(over.error().code, ErrorCode::kTooLarge);
  EXPECT_THAT(over.error().message, ::testing::HasSubstr("limit of 300 bytes"));
  auto resent = logs.append("j", "gpu-1", lines({{2, "y"}}));
  ASSERT_TRUE(resent);
  EXPECT_EQ(resent->last_seq, 2);
  EXPECT_EQ(resent->last_node_seq, 2);
  EXPECT_EQ(logs.read("j", 0, 100)->size(), 2u);
}

TEST_F(JobLogsTest, ALineTornByACrashIsIgnoredAndTheNextAppendStartsCleanly) {
  {
    JobLogs logs(dir_.path(), 1 << 20);
    ASSERT_TRUE(logs.append("j", "gpu-1", lines({{1, "kept"}})));
  }
  std::ofstream(path("j"), std::ios::app) << R"({"seq":2,"node":"gpu-1","node_s)";
  JobLogs logs(dir_.path(), 1 << 20);
  auto again = logs.append("j", "gpu-1", lines({{1, "kept"}, {2, "after"}}));
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->last_seq, 2);
  auto read = logs.read("j", 0, 100);
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[1].text, "after");
  EXPECT_EQ((*read)[1].node_seq, 2);
}

TEST_F(JobLogsTest, LinesWrittenBeforeLinesNamedTheirNodeStillCountAsShipped) {
  std::ofstream(path("j")) << R"({"seq":1,"stream":"stdout","text":"old","time":""})" << "\n";
  JobLogs logs(dir_.path(), 1 << 20);
  auto resent = logs.append("j", "gpu-1", lines({{1, "old"}, {2, "new"}}));
  ASSERT_TRUE(resent);
  EXPECT_EQ(resent->last_seq, 2);
  auto read = logs.read("j", 0, 100);
  ASSERT_EQ(read->size(), 2u);
  EXPECT_EQ((*read)[0].node, "");
  EXPECT_EQ((*read)[1].node, "gpu-1");
}

}  // namespace
}  // namespace cnlab::server::test_support

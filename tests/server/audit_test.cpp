// The audit log: every mutating request and scheduler decision is a record in a hash chain;
// `cnlab audit verify` finds an edited, deleted or reordered record and names it.
#include <gmock/gmock.h>
#include <sqlite3.h>

#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;

void exec(const std::string& db_path, const std::string& sql) {
  sqlite3* db = nullptr;
  ASSERT_EQ(sqlite3_open(db_path.c_str(), &db), SQLITE_OK);
  char* error = nullptr;
  int rc = sqlite3_exec(db, sql.c_str(), nullptr, nullptr, &error);
  std::string message = error ? error : "";
  sqlite3_free(error);
  sqlite3_close(db);
  ASSERT_EQ(rc, SQLITE_OK) << message;
}

class AuditTest : public ClusterTest {
 protected:
  // Some history: a project, a node, a job placed by the scheduler, a refused request.
  void make_history() {
    create_project("vision");
    register_node("gpu-1", "h100", 8);
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
    ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    auto viewer = server_->client(token_for("victor", "vision", "viewer"));
    EXPECT_EQ(viewer->request("POST", "/v1/jobs", job_body("vision", "h100-25").dump())->status, 403);
  }
  std::pair<int, std::string> verify() { return run_cnlab({"audit", "verify", "--data-dir", dir_.path()}); }
};

TEST_F(AuditTest, MutationsRefusalsAndSchedulerDecisionsAreRecorded) {
  make_history();
  std::set<std::string> actions;
  ASSERT_TRUE(eventually([&] {
    Json log = call(*admin_, "GET", "/v1/audit?limit=1000", 200);
    actions.clear();
    for (const auto& item : log["items"]) {
      actions.insert(item["record"]["action"].get<std::string>() + ":" + item["record"]["outcome"].get<std::string>());
    }
    return actions.count("scheduler.decisions:ok") > 0 && actions.count("jobs.create:permission_denied") > 0;
  }));
  EXPECT_TRUE(actions.count("projects.create:ok"));
  EXPECT_TRUE(actions.count("nodes.register:ok"));
  EXPECT_TRUE(actions.count("jobs.create:ok"));
  EXPECT_TRUE(actions.count("jobs.create:permission_denied"));
  Json verified = call(*admin_, "GET", "/v1/audit/verify", 200);
  EXPECT_EQ(verified["intact"], true);
}

TEST_F(AuditTest, VerifyNamesAnEditedRecord) {
  make_history();
  server_->stop(SIGTERM);
  EXPECT_EQ(verify().first, 0) << verify().second;
  exec(dir_.path() + "/store.db", "UPDATE audit SET record = replace(record, '\"outcome\":\"ok\"', '\"outcome\":\"OK\"') WHERE seq = 3");
  auto [status, out] = verify();
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr("record 3"));
  EXPECT_THAT(out, HasSubstr("edited"));
}

TEST_F(AuditTest, VerifyNamesADeletedRecord) {
  make_history();
  server_->stop(SIGTERM);
  exec(dir_.path() + "/store.db", "DELETE FROM audit WHERE seq = 4");
  auto [status, out] = verify();
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr("deleted or reordered"));
}

TEST_F(AuditTest, VerifyNamesReorderedRecords) {
  make_history();
  server_->stop(SIGTERM);
  exec(dir_.path() + "/store.db",
       "UPDATE audit SET seq = -1 WHERE seq = 2; UPDATE audit SET seq = 2 WHERE seq = 3; UPDATE audit SET seq = 3 WHERE seq = -1;");
  auto [status, out] = verify();
  EXPECT_EQ(status, 1);
  EXPECT_THAT(out, HasSubstr("record 2"));
}

}  // namespace
}  // namespace cnlab::server::test_support

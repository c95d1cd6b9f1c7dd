// Checkpoints through the API: the agent of the node that ran a job uploads what the job saved,
// checked against the digest it names; the job's status names the latest three; the node the job
// is bound to next, and users who see the job's project, download it byte for byte.
#include <gmock/gmock.h>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;
namespace fs = std::filesystem;

std::string bytes_of(size_t size, char seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(seed + i * 13 + (i >> 7));
  return bytes;
}

std::string digest_of(const std::string& bytes) { return "sha256:" + auth::sha256_hex(bytes); }

class CheckpointsTest : public ClusterTest {
 protected:
  // A checkpointable job bound to gpu-1 (one H100, the whole GPU) and reported Running by its agent.
  void start_job(const std::string& priority_class = "dev") {
    agent_ = server_->client(register_node("gpu-1", "h100", 1));
    job_ = submit_on_gpu_1(priority_class);
  }
  std::string submit_on_gpu_1(const std::string& priority_class) {
    Json body = job_body("default", "h100x1", {"sleep", "100"});
    body["spec"]["checkpointable"] = true;
    body["spec"]["priority_class"] = priority_class;
    std::string id = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
    EXPECT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
    call(*agent_, "PUT", "/v1/jobs/" + id + "/status", 200, {{"phase", "Running"}});
    return id;
  }
  net::ClientResponse put(net::Client& client, const std::string& bytes, std::string digest = "",
                          const std::string& job = "", std::map<std::string, std::string> headers = {}) {
    if (digest.empty()) digest = digest_of(bytes);
    headers.insert({{"Content-Type", "application/octet-stream"}, {"Checkpoint-Digest", digest}});
    auto r = client.request("PUT", "/v1/jobs/" + (job.empty() ? job_ : job) + "/checkpoint", bytes, headers);
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }
  net::ClientResponse get(net::Client& client, const std::string& query = "") {
    auto r = client.request("GET", "/v1/jobs/" + job_ + "/checkpoint" + query);
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }
  std::string archive_path(const std::string& bytes) const {
    return server_->data_dir() + "/checkpoints/" + auth::sha256_hex(bytes);
  }
  // What uploads left where the HTTP layer spools them: nothing, once each is answered.
  bool spool_is_empty() const {
    std::error_code ec;
    return fs::is_empty(server_->data_dir() + "/checkpoints/.incoming", ec) || ec;
  }

  std::unique_ptr<net::Client> agent_;
  std::string job_;
};

TEST_F(CheckpointsTest, TheNodeRunningTheJobUploadsItsCheckpointAndItComesBackByteForByte) {
  start_job();
  std::string saved = bytes_of(300 << 10, 5);
  auto stored = put(*agent_, saved);
  ASSERT_EQ(stored.status, 201) << stored.body;
  EXPECT_EQ(Json::parse(stored.body)["checkpoint"]["digest"], digest_of(saved));
  EXPECT_TRUE(fs::exists(archive_path(saved)));

  Json status = get_job(*admin_, job_)["status"];
  ASSERT_TRUE(status.contains("checkpoint")) << status.dump();
  EXPECT_EQ(status["checkpoint"]["digest"], digest_of(saved));
  EXPECT_EQ(status["checkpoint"]["size_bytes"], saved.size());
  EXPECT_TRUE(status["checkpoint"]["taken_at"].is_string());
  EXPECT_EQ(status["last_checkpoint_at"], status["checkpoint"]["taken_at"]);
  EXPECT_EQ(status["events"].back()["type"], "Checkpointed");

  auto by_user = get(*admin_);
  ASSERT_EQ(by_user.status, 200) << by_user.body;
  EXPECT_EQ(by_user.headers["content-type"], "application/octet-stream");
  EXPECT_EQ(by_user.headers["checkpoint-digest"], digest_of(saved));
  EXPECT_TRUE(by_user.body == saved);
  auto by_node = get(*agent_);
  ASSERT_EQ(by_node.status, 200);
  EXPECT_TRUE(by_node.body == saved);
}

TEST_F(CheckpointsTest, ANodeThatDidNotRunTheJobNeitherUploadsNorDownloadsItsCheckpoint) {
  start_job();
  ASSERT_EQ(put(*agent_, "saved").status, 201);
  auto other_node = server_->client(register_node("gpu-2", "h100", 1));
  auto refused = put(*other_node, "planted");
  EXPECT_TRUE(refused.status == 404 || refused.status == 403) << refused.status << " " << refused.body;
  EXPECT_EQ(get(*other_node).status, 404);
  EXPECT_EQ(put(*admin_, "from a user").status, 403);  // users do not upload checkpoints
  EXPECT_FALSE(fs::exists(archive_path("planted")));
  EXPECT_EQ(get(*admin_).body, "saved");
}

TEST_F(CheckpointsTest, AnArchiveThatDoesNotMatchItsDigestIsRefusedAndNothingIsKept) {
  start_job();
  auto mismatched = put(*agent_, "the bytes sent", digest_of("other bytes"));
  ASSERT_EQ(mismatched.status, 400) << mismatched.body;
  Json error = Json::parse(mismatched.body)["error"];
  EXPECT_EQ(error["field"], "Checkpoint-Digest");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(auth::sha256_hex("the bytes sent")));
  EXPECT_EQ(put(*agent_, "no digest", "not-a-digest").status, 400);
  auto missing = agent_->request("PUT", "/v1/jobs/" + job_ + "/checkpoint", "no header");
  EXPECT_EQ(missing->status, 400);
  EXPECT_THAT(missing->body, HasSubstr("Checkpoint-Digest"));

  EXPECT_FALSE(get_job(*admin_, job_)["status"].contains("checkpoint"));
  EXPECT_FALSE(fs::exists(archive_path("the bytes sent")));
  EXPECT_EQ(get(*admin_).status, 404);
  EXPECT_TRUE(spool_is_empty()) << "a refused upload leaves no file behind";
}

// What the scheduler needs to resume a process checkpoint of a job holding GPUs: whether its
// processes were dumped with GPU state (the agent's count), and the kind of GPUs of the node that
// uploaded it (the server's own record of that node).
TEST_F(CheckpointsTest, AProcessCheckpointRecordsWhetherItHoldsGpuStateAndOnWhichKindOfGpus) {
  start_job();  // gpu-1's GPUs are simulated
  auto process = [&](const std::string& bytes, const std::string& cuda) {
    std::map<std::string, std::string> headers = {{"Checkpoint-Kind", "process"}};
    if (!cuda.empty()) headers["Checkpoint-Cuda-Processes"] = cuda;
    return put(*agent_, bytes, "", "", headers);
  };
  ASSERT_EQ(process("dump with two suspended", "2").status, 201);
  Json checkpoint = get_job(*admin_, job_)["status"]["checkpoint"];
  EXPECT_EQ(checkpoint["kind"], "process");
  EXPECT_EQ(checkpoint["gpu_state"], true);
  EXPECT_EQ(checkpoint["gpus"], "simulated");
  ASSERT_EQ(process("dump by CRIU alone", "0").status, 201);
  checkpoint = get_job(*admin_, job_)["status"]["checkpoint"];
  EXPECT_FALSE(checkpoint.contains("gpu_state")) << checkpoint.dump();
  EXPECT_EQ(checkpoint["gpus"], "simulated");
  // An agent from before the count: a dump of a job holding GPUs may hold their state.
  ASSERT_EQ(process("dump from an older agent", "").status, 201);
  EXPECT_EQ(get_job(*admin_, job_)["status"]["checkpoint"]["gpu_state"], true);

  for (const char* bad : {"-1", "two", "1048577"}) {
    auto refused = process("refused", bad);
    ASSERT_EQ(refused.status, 400) << bad << " " << refused.body;
    Json error = Json::parse(refused.body)["error"];
    EXPECT_EQ(error["field"], "Checkpoint-Cuda-Processes");
    EXPECT_THAT(error["message"].get<std::string>(), HasSubstr("an integer from 0 to 1048576"));
  }
  auto files_with_count = put(*agent_, "files", "", "", {{"Checkpoint-Kind", "files"}, {"Checkpoint-Cuda-Processes", "1"}});
  EXPECT_EQ(files_with_count.status, 400) << files_with_count.body;
  EXPECT_THAT(files_with_count.body, HasSubstr("sent only with Checkpoint-Kind"));
  EXPECT_EQ(get_job(*admin_, job_)["status"]["checkpoint"]["digest"], digest_of("dump from an older agent"));

  // A files checkpoint says nothing of GPUs.
  ASSERT_EQ(put(*agent_, "files saved").status, 201);
  checkpoint = get_job(*admin_, job_)["status"]["checkpoint"];
  EXPECT_FALSE(checkpoint.contains("gpus")) << checkpoint.dump();
  EXPECT_FALSE(checkpoint.contains("gpu_state")) << checkpoint.dump();
}

TEST_F(CheckpointsTest, AProcessCheckpointFromANodeWithRealGpusSaysSoAndOneOfAJobWithoutGpusSaysNothing) {
  Json real = node_object("gpu-1", "h100", 2);
  real["status"]["simulated"] = false;
  for (auto& gpu : real["status"]["gpus"]) gpu.erase("simulated");
  agent_ = server_->client(register_node("gpu-1", "h100", 2, real));
  job_ = submit_on_gpu_1("dev");
  ASSERT_EQ(put(*agent_, "real dump", "", "", {{"Checkpoint-Kind", "process"}, {"Checkpoint-Cuda-Processes", "1"}}).status, 201);
  Json checkpoint = get_job(*admin_, job_)["status"]["checkpoint"];
  EXPECT_EQ(checkpoint["gpus"], "real");
  EXPECT_EQ(checkpoint["gpu_state"], true);

  Json body = job_body("default", "none", {"sleep", "100"});
  body["spec"]["checkpointable"] = true;
  std::string host_only = call(*admin_, "POST", "/v1/jobs", 201, body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, host_only, "Scheduled"));
  call(*agent_, "PUT", "/v1/jobs/" + host_only + "/status", 200, {{"phase", "Running"}});
  ASSERT_EQ(put(*agent_, "host dump", "", host_only, {{"Checkpoint-Kind", "process"}, {"Checkpoint-Cuda-Processes", "0"}}).status, 201);
  checkpoint = get_job(*admin_, host_only)["status"]["checkpoint"];
  EXPECT_EQ(checkpoint["kind"], "process");
  EXPECT_FALSE(checkpoint.contains("gpus")) << checkpoint.dump();
  EXPECT_FALSE(checkpoint.contains("gpu_state")) << checkpoint.dump();
}

TEST_F(CheckpointsTest, AUserOfAnotherProjectCannotSeeTheCheckpoint) {
  start_job();
  ASSERT_EQ(put(*agent_, "saved").status, 201);
  create_project("vision");
  auto outsider = server_->client(token_for("olga", "vision", "member"));
  EXPECT_EQ(get(*outsider).status, 404);
  auto viewer = server_->client(token_for("vera", "default", "viewer"));
  EXPECT_EQ(get(*viewer).body, "saved");
  EXPECT_EQ(admin_->request("GET", "/v1/jobs/no-such-job/checkpoint")->status, 404);
}

TEST_F(CheckpointsTest, OnlyTheLatestThreeAreKeptAndTheArchivesOfOlderOnesAreRemoved) {
  start_job();
  std::vector<std::string> saved = {"first", "second", "third", "fourth"};
  for (const auto& s : saved) ASSERT_EQ(put(*agent_, s).status, 201) << s;

  Json status = get_job(*admin_, job_)["status"];
  EXPECT_EQ(status["checkpoint"]["digest"], digest_of("fourth"));
  ASSERT_EQ(status["older_checkpoints"].size(), 2u) << status.dump();
  EXPECT_EQ(status["older_checkpoints"][0]["digest"], digest_of("third"));
  EXPECT_EQ(status["older_checkpoints"][1]["digest"], digest_of("second"));
  EXPECT_FALSE(fs::exists(archive_path("first")));
  for (const char* kept : {"second", "third", "fourth"}) EXPECT_TRUE(fs::exists(archive_path(kept))) << kept;

  EXPECT_EQ(get(*admin_).body, "fourth");
  EXPECT_EQ(get(*admin_, "?digest=" + digest_of("second")).body, "second");
  EXPECT_EQ(get(*admin_, "?digest=" + digest_of("first")).status, 404);
  // Operators see them counted, and what the kept ones weigh: "second" + "third" + "fourth".
  EXPECT_EQ(metric("cnlab_checkpoints_total{outcome=\"stored\",kind=\"files\"}"), 4);
  EXPECT_EQ(metric("cnlab_checkpoint_stored_bytes"), 6 + 5 + 6);
}

TEST_F(CheckpointsTest, AnArchiveAnotherJobStillNamesIsNotRemoved) {
  agent_ = server_->client(register_node("gpu-1", "h100", 2));
  std::string one = submit_on_gpu_1("dev");
  std::string two = submit_on_gpu_1("dev");
  ASSERT_EQ(put(*agent_, "shared", "", two).status, 201);
  for (const char* s : {"shared", "a", "b", "c"}) ASSERT_EQ(put(*agent_, s, "", one).status, 201) << s;
  EXPECT_TRUE(fs::exists(archive_path("shared")));  // job two still names it
  EXPECT_EQ(get_job(*admin_, two)["status"]["checkpoint"]["digest"], digest_of("shared"));
  for (const char* s : {"d", "e", "f"}) ASSERT_EQ(put(*agent_, s, "", two).status, 201) << s;
  EXPECT_FALSE(fs::exists(archive_path("shared")));  // now nobody does
}

TEST_F(CheckpointsTest, ThePreemptedJobsLastNodeUploadsAfterThePlacementIsCleared) {
  start_job("opportunistic");
  Json urgent_body = job_body("default", "h100x1", {"sleep", "100"});
  urgent_body["spec"]["priority_class"] = "production";
  std::string urgent = call(*admin_, "POST", "/v1/jobs", 201, urgent_body)["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, job_, "Pending"));
  ASSERT_TRUE(get_job(*admin_, job_)["status"].value("placement", Json::array()).empty());

  // The agent stops the job, then uploads: the job is no longer bound to it, but it ran the
  // latest attempt.
  auto stored = put(*agent_, "saved on pre-emption");
  ASSERT_EQ(stored.status, 201) << stored.body;
  Json status = get_job(*admin_, job_)["status"];
  EXPECT_EQ(status["checkpoint"]["digest"], digest_of("saved on pre-emption"));
  EXPECT_EQ(status["attempt_nodes"], Json::array({"gpu-1"}));
  // Downloads are for the node it is bound to next; gpu-1 holds it no more.
  EXPECT_EQ(get(*agent_).status, 404);
  EXPECT_EQ(get(*admin_).body, "saved on pre-emption");

  // Once it has ended it takes no checkpoint.
  call(*admin_, "POST", "/v1/jobs/" + job_ + "/cancel", 200);
  ASSERT_TRUE(wait_for_phase(*admin_, job_, "Cancelled"));
  EXPECT_EQ(put(*agent_, "too late").status, 409);
  (void)urgent;
}

class CheckpointLimitsTest : public CheckpointsTest {
 protected:
  void SetUp() override { start_server({"--max-checkpoint-bytes", "1000"}); }
};

TEST_F(CheckpointLimitsTest, ACheckpointOverTheLimitGets413WithTheLimit) {
  start_job();
  auto too_big = put(*agent_, bytes_of(2000, 1));
  ASSERT_EQ(too_big.status, 413) << too_big.body;
  EXPECT_THAT(too_big.body, HasSubstr("1000"));
  EXPECT_FALSE(get_job(*admin_, job_)["status"].contains("checkpoint"));
  EXPECT_EQ(put(*agent_, bytes_of(1000, 2)).status, 201);
  EXPECT_TRUE(spool_is_empty());
}

// --checkpoint-dir: the archives on a volume of their own, outside the data directory.
class CheckpointDirTest : public CheckpointsTest {
 protected:
  void SetUp() override { start_server({"--checkpoint-dir", volume()}); }
  std::string volume() const { return volume_.path() + "/big/checkpoints"; }
  TempDir volume_;
};

TEST_F(CheckpointDirTest, ArchivesAreKeptInTheDirectoryGivenAndComeBackFromIt) {
  start_job();
  const std::string saved = bytes_of(3 << 20, 7);  // past a JSON body: spooled to disk as it arrives
  auto stored = put(*agent_, saved);
  ASSERT_EQ(stored.status, 201) << stored.body;
  EXPECT_TRUE(fs::exists(volume() + "/" + auth::sha256_hex(saved)));
  EXPECT_FALSE(fs::exists(archive_path(saved))) << "not in the data directory";
  EXPECT_EQ(fs::status(volume()).permissions() & fs::perms::all, fs::perms::owner_all) << "made 0700";
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(volume() + "/.incoming", ec)) << "its upload spool is there too, and empty";
  auto fetched = get(*agent_);
  ASSERT_EQ(fetched.status, 200) << fetched.body;
  EXPECT_TRUE(fetched.body == saved);
  // A second one drops nothing yet; the job's status names both, and both files are there.
  const std::string again = bytes_of(1000, 9);
  ASSERT_EQ(put(*agent_, again).status, 201);
  EXPECT_TRUE(fs::exists(volume() + "/" + auth::sha256_hex(again)));
  EXPECT_EQ(get(*admin_).body, again);
}

TEST_F(CheckpointDirTest, ADirectoryTheServerCannotUseIsRefusedNamingTheFlag) {
  server_->stop(SIGTERM);
  const std::string file = volume_.path() + "/a-file";
  std::ofstream(file) << "x";
  for (const std::string& bad : {file, file + "/below"}) {
    auto [status, out] = run_cnlab({"server", "--data-dir", server_->data_dir(), "--listen", "127.0.0.1:0",
                                    "--checkpoint-dir", bad});
    EXPECT_EQ(status, 2) << out;
    EXPECT_THAT(out, HasSubstr("--checkpoint-dir")) << out;
    EXPECT_THAT(out, HasSubstr(bad)) << out;
  }
}

TEST_F(CheckpointsTest, ArchivesMissingWhereCheckpointsAreKeptAreSaidAtStart) {
  start_job();
  ASSERT_EQ(put(*agent_, "saved").status, 201);
  // Moved to a volume of its own without its archives: the server says so as it starts.
  TempDir volume;
  server_->stop(SIGTERM);
  start_server({"--checkpoint-dir", volume.path()});
  const std::string log = slurp(server_->data_dir() + "/server.log");
  EXPECT_THAT(log, HasSubstr("checkpoint archives missing count=1 of=1"));
  EXPECT_THAT(log, HasSubstr("jobs=\"" + job_ + "\""));
  EXPECT_EQ(get(*admin_).status, 404);
  // Back where they are, nothing is said (the log goes on from where it was).
  server_->stop(SIGTERM);
  const size_t before = slurp(server_->data_dir() + "/server.log").size();
  start_server({});
  EXPECT_THAT(slurp(server_->data_dir() + "/server.log").substr(before), Not(HasSubstr("checkpoint archives missing")));
  EXPECT_EQ(get(*admin_).body, "saved");
}

class LargeCheckpointsTest : public CheckpointsTest {
 protected:
  // Workspaces and artifacts are held to 64 KiB here; checkpoints keep their own limit.
  void SetUp() override { start_server({"--max-upload-bytes", "65536"}); }
};

TEST_F(LargeCheckpointsTest, ACheckpointPastTheUploadLimitGoesInFromAFileAndComesBackToOne) {
  start_job();
  const std::string saved = bytes_of(6 << 20, 3);
  const fs::path dir = fs::path(server_->data_dir()).parent_path() / "large-checkpoint";
  fs::create_directories(dir);
  std::ofstream(dir / "sent", std::ios::binary) << saved;
  auto stored = agent_->upload("PUT", "/v1/jobs/" + job_ + "/checkpoint", (dir / "sent").string(),
                               {{"Content-Type", "application/octet-stream"}, {"Checkpoint-Digest", digest_of(saved)}});
  ASSERT_TRUE(stored) << stored.error().to_string();
  ASSERT_EQ(stored->status, 201) << stored->body;
  EXPECT_EQ(get_job(*admin_, job_)["status"]["checkpoint"]["size_bytes"], saved.size());
  EXPECT_TRUE(spool_is_empty());

  auto fetched = admin_->download("/v1/jobs/" + job_ + "/checkpoint", (dir / "fetched").string());
  ASSERT_TRUE(fetched) << fetched.error().to_string();
  ASSERT_EQ(fetched->status, 200);
  EXPECT_EQ(fetched->headers["checkpoint-digest"], digest_of(saved));
  std::ifstream in(dir / "fetched", std::ios::binary);
  EXPECT_TRUE(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) == saved);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace cnlab::server::test_support

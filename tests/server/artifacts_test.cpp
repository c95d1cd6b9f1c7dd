// Artifacts through the API: the agent of the job's node uploads the files the job wrote, users who
// may see the job list and download them, and nothing outside the job's directory is ever reached.
#include <gmock/gmock.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kOctets = {{"Content-Type", "application/octet-stream"}};

std::string bytes_of(size_t size, char seed) {
  std::string bytes(size, '\0');
  for (size_t i = 0; i < size; ++i) bytes[i] = static_cast<char>(seed + i * 7 + (i >> 8));
  return bytes;
}

class ArtifactsTest : public ClusterTest {
 protected:
  // A job bound to gpu-1 and the agent credential of that node.
  void start_job() {
    agent_ = server_->client(register_node("gpu-1", "h100", 8));
    job_ = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
    ASSERT_TRUE(wait_for_phase(*admin_, job_, "Scheduled"));
  }
  net::ClientResponse put(net::Client& client, const std::string& path, const std::string& bytes) {
    auto r = client.request("PUT", "/v1/jobs/" + job_ + "/artifacts/" + path, bytes, kOctets);
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }
  std::string job_dir() const { return server_->data_dir() + "/artifacts/" + job_; }
  bool spool_is_empty() const {
    std::error_code ec;
    return fs::is_empty(server_->data_dir() + "/artifacts/.incoming", ec) || ec;
  }

  std::unique_ptr<net::Client> agent_;
  std::string job_;
};

TEST_F(ArtifactsTest, TheAgentUploadsArtifactsAndAUserListsAndDownloadsThem) {
  start_job();
  std::string model = bytes_of(200 << 10, 3);
  std::string metrics = R"({"loss": 0.12})";
  auto stored = put(*agent_, "out/model.bin", model);
  ASSERT_EQ(stored.status, 201) << stored.body;
  Json answer = Json::parse(stored.body);
  EXPECT_EQ(answer["path"], "out/model.bin");
  EXPECT_EQ(answer["size_bytes"], model.size());
  EXPECT_EQ(answer["sha256"], auth::sha256_hex(model));
  ASSERT_EQ(put(*agent_, "metrics.json", "old").status, 201);
  EXPECT_EQ(put(*agent_, "metrics.json", metrics).status, 200);  // the same path again replaces it
  ASSERT_EQ(put(*agent_, "out/loss%20curve.csv", "1,2\n").status, 201);

  Json listed = call(*admin_, "GET", "/v1/jobs/" + job_ + "/artifacts", 200);
  ASSERT_EQ(listed["items"].size(), 3u);
  EXPECT_EQ(listed["items"][0]["path"], "metrics.json");
  EXPECT_EQ(listed["items"][0]["size_bytes"], metrics.size());
  EXPECT_EQ(listed["items"][0]["sha256"], auth::sha256_hex(metrics));
  EXPECT_EQ(listed["items"][1]["path"], "out/loss curve.csv");
  EXPECT_EQ(listed["items"][2]["path"], "out/model.bin");
  EXPECT_EQ(listed["items"][2]["sha256"], auth::sha256_hex(model));
  EXPECT_EQ(listed["total_bytes"], model.size() + metrics.size() + 4);

  auto downloaded = admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/out/model.bin");
  ASSERT_EQ(downloaded->status, 200);
  EXPECT_EQ(downloaded->headers["content-type"], "application/octet-stream");
  EXPECT_TRUE(downloaded->body == model);
  EXPECT_EQ(admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/metrics.json")->body, metrics);
  EXPECT_EQ(admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/out/none.bin")->status, 404);
  // The job's own agent reads them too; a finished job keeps them.
  call(*agent_, "PUT", "/v1/jobs/" + job_ + "/status", 200, {{"phase", "Running"}});
  call(*agent_, "PUT", "/v1/jobs/" + job_ + "/status", 200, {{"phase", "Succeeded"}, {"exit_code", 0}});
  ASSERT_EQ(put(*agent_, "late.txt", "written after the end").status, 201);
  EXPECT_EQ(call(*agent_, "GET", "/v1/jobs/" + job_ + "/artifacts", 200)["items"].size(), 4u);
}

TEST_F(ArtifactsTest, PathsThatCouldLeaveTheJobsDirectoryAreRefused) {
  start_job();
  std::string long_path;
  while (long_path.size() <= 4096) long_path += "abcdefgh/";
  long_path += "x";
  std::string deep;
  for (int i = 0; i < 33; ++i) deep += "d/";
  deep += "x";
  for (const std::string& path : {std::string("../x"), std::string("%2E%2E/%2E%2E/x"), std::string("/etc/passwd"),
                                  std::string("%2Fetc%2Fpasswd"), std::string("a/./b"), std::string("a//b"),
                                  std::string("a/"), std::string("a%5Cb"), std::string("a%00b"), std::string(".."),
                                  long_path, deep}) {
    auto r = put(*agent_, path, "x");
    EXPECT_EQ(r.status, 400) << path << ": " << r.body;
    if (r.status == 400) {
      EXPECT_EQ(Json::parse(r.body)["error"]["field"], "path") << path;
    }
    auto read = admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/" + path);
    EXPECT_EQ(read->status, 400) << path << ": " << read->body;
  }
  EXPECT_FALSE(std::filesystem::exists(server_->data_dir() + "/artifacts/x"));
  EXPECT_FALSE(std::filesystem::exists(server_->data_dir() + "/x"));
  EXPECT_EQ(call(*admin_, "GET", "/v1/jobs/" + job_ + "/artifacts", 200)["items"].size(), 0u);
}

TEST_F(ArtifactsTest, ASymbolicLinkUnderTheJobsDirectoryIsNeverFollowed) {
  start_job();
  ASSERT_EQ(put(*agent_, "keep.txt", "kept").status, 201);
  TempDir outside;
  {
    std::ofstream secret(outside.path() + "/secret.txt");
    secret << "not an artifact";
  }
  ASSERT_EQ(::symlink(outside.path().c_str(), (job_dir() + "/link").c_str()), 0);
  ASSERT_EQ(::symlink((outside.path() + "/secret.txt").c_str(), (job_dir() + "/secret.txt").c_str()), 0);

  EXPECT_EQ(admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/link/secret.txt")->status, 404);
  EXPECT_EQ(admin_->request("GET", "/v1/jobs/" + job_ + "/artifacts/secret.txt")->status, 404);
  EXPECT_EQ(put(*agent_, "link/planted.txt", "x").status, 409);
  EXPECT_FALSE(std::filesystem::exists(outside.path() + "/planted.txt"));
  Json listed = call(*admin_, "GET", "/v1/jobs/" + job_ + "/artifacts", 200);
  ASSERT_EQ(listed["items"].size(), 1u);
  EXPECT_EQ(listed["items"][0]["path"], "keep.txt");
}

TEST_F(ArtifactsTest, OnlyTheAgentOfTheJobsNodeUploadsAndOnlyThoseWhoSeeTheJobRead) {
  start_job();
  auto other_node = server_->client(register_node("gpu-2", "h100", 8));
  auto other = put(*other_node, "x.txt", "x");
  EXPECT_TRUE(other.status == 404 || other.status == 403) << other.status;
  EXPECT_EQ(put(*admin_, "x.txt", "x").status, 403);  // users do not upload artifacts
  ASSERT_EQ(put(*agent_, "x.txt", "x").status, 201);

  create_project("vision");
  auto outsider = server_->client(token_for("olga", "vision", "member"));
  EXPECT_EQ(outsider->request("GET", "/v1/jobs/" + job_ + "/artifacts")->status, 404);
  EXPECT_EQ(outsider->request("GET", "/v1/jobs/" + job_ + "/artifacts/x.txt")->status, 404);
  EXPECT_EQ(other_node->request("GET", "/v1/jobs/" + job_ + "/artifacts/x.txt")->status, 404);
  auto viewer = server_->client(token_for("vera", "default", "viewer"));
  EXPECT_EQ(viewer->request("GET", "/v1/jobs/" + job_ + "/artifacts/x.txt")->body, "x");
  EXPECT_EQ(admin_->request("GET", "/v1/jobs/no-such-job/artifacts")->status, 404);
}

// Artifacts are written to disk as they arrive and sent from their file: a job's 80 MiB model never
// sits in the server's memory.
TEST_F(ArtifactsTest, ALargeArtifactGoesInAndOutThroughFilesNotTheServersMemory) {
  start_job();
  const std::string model = bytes_of(80 << 20, 5);
  const fs::path dir = fs::path(server_->data_dir()).parent_path() / "large-artifact";
  fs::create_directories(dir);
  std::ofstream(dir / "sent", std::ios::binary) << model;
  const int64_t before = server_->peak_resident_kib();
  ASSERT_GT(before, 0);

  auto stored = agent_->upload("PUT", "/v1/jobs/" + job_ + "/artifacts/out/model.bin", (dir / "sent").string(), kOctets);
  ASSERT_TRUE(stored) << stored.error().to_string();
  ASSERT_EQ(stored->status, 201) << stored->body;
  EXPECT_EQ(Json::parse(stored->body)["sha256"], auth::sha256_hex(model));
  auto fetched = admin_->download("/v1/jobs/" + job_ + "/artifacts/out/model.bin", (dir / "fetched").string());
  ASSERT_TRUE(fetched) << fetched.error().to_string();
  ASSERT_EQ(fetched->status, 200);
  EXPECT_TRUE(slurp((dir / "fetched").string()) == model);

  const int64_t grown_kib = server_->peak_resident_kib() - before;
  RecordProperty("server_peak_growth_kib", std::to_string(grown_kib));
  EXPECT_LT(grown_kib, 24 << 10) << "the server's peak memory grew by " << grown_kib << " KiB for an 80 MiB artifact";
  EXPECT_TRUE(spool_is_empty());
  fs::remove_all(dir);
}

class ArtifactLimitsTest : public ArtifactsTest {
 protected:
  void SetUp() override {
    start_server({"--max-upload-bytes", "65536", "--max-artifact-bytes-per-job", "100000"});
  }
};

TEST_F(ArtifactLimitsTest, UploadsOverTheFileOrTheJobLimitGet413WithTheNumbers) {
  start_job();
  auto too_big = put(*agent_, "big.bin", bytes_of(70000, 1));
  ASSERT_EQ(too_big.status, 413);
  EXPECT_THAT(too_big.body, HasSubstr("65536"));

  ASSERT_EQ(put(*agent_, "a.bin", bytes_of(60000, 1)).status, 201);
  auto over = put(*agent_, "b.bin", bytes_of(60000, 2));
  ASSERT_EQ(over.status, 413);
  std::string message = Json::parse(over.body)["error"]["message"];
  EXPECT_THAT(message, HasSubstr("120000"));
  EXPECT_THAT(message, HasSubstr("100000"));
  // Replacing a file counts the new size instead of the old one.
  EXPECT_EQ(put(*agent_, "a.bin", bytes_of(65000, 3)).status, 200);
  ASSERT_EQ(put(*agent_, "b.bin", bytes_of(35000, 4)).status, 201);
  Json listed = call(*admin_, "GET", "/v1/jobs/" + job_ + "/artifacts", 200);
  EXPECT_EQ(listed["total_bytes"], 100000);
  EXPECT_TRUE(spool_is_empty()) << "a refused upload leaves no file behind";
}

}  // namespace
}  // namespace cnlab::server::test_support

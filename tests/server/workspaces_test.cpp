// Workspaces through the API: content-addressed uploads checked against their digest and kept once,
// HEAD and GET for those who may read them, the admission check of jobs that name one, and the
// body limits of upload and JSON endpoints.
#include <gmock/gmock.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>

#include "auth/auth.h"
#include "fixtures.h"

namespace cnlab::server::test_support {
namespace {

using ::testing::HasSubstr;
namespace fs = std::filesystem;

const std::map<std::string, std::string> kOctets = {{"Content-Type", "application/octet-stream"}};

// Bytes no text handling would leave alone: NULs, high bytes, CR and LF.
std::string archive(size_t size, unsigned seed = 1) {
  std::string bytes(size, '\0');
  unsigned x = seed;
  for (auto& b : bytes) {
    x = x * 1103515245u + 12345u;
    b = static_cast<char>(x >> 16);
  }
  return bytes;
}

std::string digest_of(const std::string& bytes) { return "sha256:" + auth::sha256_hex(bytes); }

class WorkspacesTest : public ClusterTest {
 protected:
  net::ClientResponse upload(net::Client& client, const std::string& digest, const std::string& project,
                             const std::string& bytes) {
    auto r = client.request("PUT", "/v1/workspaces/" + digest + "?project=" + project, bytes, kOctets);
    if (!r) throw std::runtime_error(r.error().to_string());
    return *r;
  }
  int status(net::Client& client, const std::string& method, const std::string& target) {
    auto r = client.request(method, target);
    if (!r) throw std::runtime_error(r.error().to_string());
    return r->status;
  }
  std::string file_of(const std::string& digest) const {
    return server_->data_dir() + "/workspaces/" + digest.substr(std::string("sha256:").size());
  }
  Json job_in(const std::string& project, const std::string& digest, int64_t size) {
    Json body = job_body(project, "h100-25");
    body["spec"]["workspace"] = {{"digest", digest}, {"size_bytes", size}};
    return body;
  }
};

TEST_F(WorkspacesTest, AnUploadedWorkspaceAnswersHeadAndGetWithTheSameBytes) {
  std::string bytes = archive(300 << 10);
  std::string digest = digest_of(bytes);
  EXPECT_EQ(status(*admin_, "HEAD", "/v1/workspaces/" + digest), 404);

  auto created = upload(*admin_, digest, "default", bytes);
  ASSERT_EQ(created.status, 201) << created.body;
  Json object = Json::parse(created.body);
  EXPECT_EQ(object["spec"]["digest"], digest);
  EXPECT_EQ(object["spec"]["size_bytes"], bytes.size());
  EXPECT_EQ(object["spec"]["project"], "default");
  EXPECT_EQ(object["spec"]["uploaded_by"], "admin");
  EXPECT_EQ(created.headers["location"], "/v1/workspaces/" + digest);

  EXPECT_EQ(status(*admin_, "HEAD", "/v1/workspaces/" + digest), 200);
  auto fetched = admin_->request("GET", "/v1/workspaces/" + digest);
  ASSERT_EQ(fetched->status, 200);
  EXPECT_EQ(fetched->headers["content-type"], "application/octet-stream");
  EXPECT_TRUE(fetched->body == bytes) << "the bytes differ (" << fetched->body.size() << " of " << bytes.size() << ")";
  // The bare hex form names the same workspace.
  auto bare = admin_->request("GET", "/v1/workspaces/" + digest.substr(7));
  ASSERT_EQ(bare->status, 200);
  EXPECT_TRUE(bare->body == bytes);
  // A malformed digest is refused naming it.
  auto bad = admin_->request("GET", "/v1/workspaces/sha256:ABC");
  EXPECT_EQ(bad->status, 400);
  EXPECT_EQ(Json::parse(bad->body)["error"]["field"], "digest");
}

TEST_F(WorkspacesTest, AWrongDigestIsRefusedNamingTheGivenAndTheComputedOne) {
  std::string bytes = archive(4096);
  std::string claimed = digest_of("something else");
  auto refused = upload(*admin_, claimed, "default", bytes);
  ASSERT_EQ(refused.status, 400);
  Json error = Json::parse(refused.body)["error"];
  EXPECT_EQ(error["field"], "digest");
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(claimed));
  EXPECT_THAT(error["message"].get<std::string>(), HasSubstr(digest_of(bytes)));
  EXPECT_EQ(status(*admin_, "HEAD", "/v1/workspaces/" + claimed), 404);
  EXPECT_FALSE(std::filesystem::exists(file_of(claimed)));
  // Nothing is left behind in the temporary directory either.
  std::error_code ec;
  auto incoming = std::filesystem::directory_iterator(server_->data_dir() + "/workspaces/.incoming", ec);
  EXPECT_EQ(std::distance(incoming, std::filesystem::directory_iterator()), 0);
}

TEST_F(WorkspacesTest, UploadingAnExistingDigestAgainIsANoOpThatLeavesTheFileAlone) {
  std::string bytes = archive(64 << 10);
  std::string digest = digest_of(bytes);
  ASSERT_EQ(upload(*admin_, digest, "default", bytes).status, 201);
  struct stat before {};
  ASSERT_EQ(::stat(file_of(digest).c_str(), &before), 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // a rewrite would show in the times

  auto again = upload(*admin_, digest, "default", bytes);
  EXPECT_EQ(again.status, 200) << again.body;
  struct stat after {};
  ASSERT_EQ(::stat(file_of(digest).c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(after.st_mtim.tv_sec, before.st_mtim.tv_sec);
  EXPECT_EQ(after.st_mtim.tv_nsec, before.st_mtim.tv_nsec);
  // Re-uploading still proves the bytes: other bytes under the same digest are refused.
  EXPECT_EQ(upload(*admin_, digest, "default", archive(64 << 10, 2)).status, 400);
}

TEST_F(WorkspacesTest, OnlyThoseWhoMayReadItsProjectSeeAWorkspace) {
  create_project("vision");
  create_project("nlp");
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto viewer = server_->client(token_for("victor", "vision", "viewer"));
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  std::string bytes = archive(10000);
  std::string digest = digest_of(bytes);
  ASSERT_EQ(upload(*alice, digest, "vision", bytes).status, 201);

  EXPECT_EQ(status(*viewer, "HEAD", "/v1/workspaces/" + digest), 200);
  EXPECT_EQ(status(*viewer, "GET", "/v1/workspaces/" + digest), 200);
  EXPECT_EQ(status(*bob, "HEAD", "/v1/workspaces/" + digest), 404);
  EXPECT_EQ(status(*bob, "GET", "/v1/workspaces/" + digest), 404);
  // Uploading needs the submit right in a project the caller can see.
  EXPECT_EQ(upload(*viewer, digest_of("v"), "vision", "v").status, 403);
  EXPECT_EQ(upload(*bob, digest_of("b"), "vision", "b").status, 404);
  EXPECT_EQ(upload(*alice, digest_of("a"), "no-such-project", "a").status, 404);
}

TEST_F(WorkspacesTest, UploadingTheSameBytesToAnotherProjectSharesTheOneArchive) {
  create_project("vision");
  create_project("nlp");
  register_node("gpu-1", "h100", 8);
  auto alice = server_->client(token_for("alice", "vision", "member"));
  auto bob = server_->client(token_for("bob", "nlp", "member"));
  std::string bytes = archive(20000);
  std::string digest = digest_of(bytes);
  ASSERT_EQ(upload(*alice, digest, "vision", bytes).status, 201);
  // Knowing the digest is not enough to run in it...
  auto refused = bob->request("POST", "/v1/jobs", job_in("nlp", digest, 20000).dump());
  EXPECT_EQ(refused->status, 422) << refused->body;
  // ...holding the bytes is: the upload is answered as a known one and the file is not written again.
  struct stat before {};
  ASSERT_EQ(::stat(file_of(digest).c_str(), &before), 0);
  auto shared = upload(*bob, digest, "nlp", bytes);
  EXPECT_EQ(shared.status, 200) << shared.body;
  struct stat after {};
  ASSERT_EQ(::stat(file_of(digest).c_str(), &after), 0);
  EXPECT_EQ(after.st_ino, before.st_ino);
  EXPECT_EQ(status(*bob, "GET", "/v1/workspaces/" + digest), 200);
  call(*bob, "POST", "/v1/jobs", 201, job_in("nlp", digest, 20000));
  EXPECT_EQ(status(*alice, "GET", "/v1/workspaces/" + digest), 200);
}

TEST_F(WorkspacesTest, AJobNamingAWorkspaceThatWasNotUploadedIsRefused) {
  register_node("gpu-1", "h100", 8);
  std::string bytes = archive(5000);
  std::string digest = digest_of(bytes);
  auto missing = admin_->request("POST", "/v1/jobs", job_in("default", digest, 5000).dump());
  ASSERT_EQ(missing->status, 422) << missing->body;
  EXPECT_EQ(Json::parse(missing->body)["error"]["field"], "spec.workspace.digest");
  EXPECT_THAT(missing->body, HasSubstr("upload it first"));

  ASSERT_EQ(upload(*admin_, digest, "default", bytes).status, 201);
  auto wrong_size = admin_->request("POST", "/v1/jobs", job_in("default", digest, 4999).dump());
  ASSERT_EQ(wrong_size->status, 422) << wrong_size->body;
  EXPECT_EQ(Json::parse(wrong_size->body)["error"]["field"], "spec.workspace.digest");
  EXPECT_THAT(wrong_size->body, HasSubstr("5000 bytes"));
  call(*admin_, "POST", "/v1/jobs", 201, job_in("default", digest, 5000));
}

TEST_F(WorkspacesTest, TheAgentOfTheJobsNodeFetchesItsWorkspaceAndOtherNodesDoNot) {
  auto mine = server_->client(register_node("gpu-1", "h100", 1));
  auto other = server_->client(register_node("gpu-2", "l4", 1));
  std::string bytes = archive(9000);
  std::string digest = digest_of(bytes);
  ASSERT_EQ(upload(*admin_, digest, "default", bytes).status, 201);
  EXPECT_EQ(status(*mine, "GET", "/v1/workspaces/" + digest), 404);  // no job of its names it yet
  std::string id = call(*admin_, "POST", "/v1/jobs", 201, job_in("default", digest, 9000))["metadata"]["name"];
  ASSERT_TRUE(wait_for_phase(*admin_, id, "Scheduled"));
  auto fetched = mine->request("GET", "/v1/workspaces/" + digest);
  ASSERT_EQ(fetched->status, 200);
  EXPECT_TRUE(fetched->body == bytes);
  EXPECT_EQ(status(*other, "GET", "/v1/workspaces/" + digest), 404);
  // Naming the job (as agents do), the node gets it for its own job only.
  auto named = mine->request("GET", "/v1/workspaces/" + digest + "?job=" + id);
  ASSERT_EQ(named->status, 200);
  EXPECT_TRUE(named->body == bytes);
  EXPECT_EQ(status(*mine, "HEAD", "/v1/workspaces/" + digest + "?job=" + id), 200);
  EXPECT_EQ(status(*other, "GET", "/v1/workspaces/" + digest + "?job=" + id), 404);  // not bound to gpu-2
  EXPECT_EQ(status(*mine, "GET", "/v1/workspaces/" + digest + "?job=no-such-job"), 404);
  std::string plain = call(*admin_, "POST", "/v1/jobs", 201, job_body("default", "h100-25"))["metadata"]["name"];
  EXPECT_EQ(status(*mine, "GET", "/v1/workspaces/" + digest + "?job=" + plain), 404);  // names no workspace
  // Nodes do not upload.
  EXPECT_EQ(upload(*mine, digest_of("n"), "default", "n").status, 403);
}

TEST_F(WorkspacesTest, AJsonEndpointStillRefusesATwoMebibyteBody) {
  std::string big = "{\"pad\":\"" + std::string(2 << 20, 'x') + "\"}";
  auto r = admin_->request("POST", "/v1/jobs", big);
  ASSERT_TRUE(r) << r.error().to_string();
  EXPECT_EQ(r->status, 413);
  EXPECT_EQ(Json::parse(r->body)["error"]["code"], "too_large");
  // While an upload of the same size goes through.
  std::string bytes = archive(2 << 20);
  EXPECT_EQ(upload(*admin_, digest_of(bytes), "default", bytes).status, 201);
}

// An upload is written to disk as it arrives and a download sent from the file: neither is held in
// the server's memory, however large (here 96 MiB against --max-upload-bytes of 512 MiB).
TEST_F(WorkspacesTest, ALargeWorkspaceGoesInAndOutThroughFilesNotTheServersMemory) {
  const std::string bytes = archive(96 << 20);
  const std::string digest = digest_of(bytes);
  const fs::path dir = fs::path(server_->data_dir()).parent_path() / "large-workspace";
  fs::create_directories(dir);
  std::ofstream(dir / "sent", std::ios::binary) << bytes;
  const int64_t before = server_->peak_resident_kib();
  ASSERT_GT(before, 0);

  auto wrong = admin_->upload("PUT", "/v1/workspaces/" + digest_of("other") + "?project=default",
                              (dir / "sent").string(), kOctets);
  ASSERT_TRUE(wrong) << wrong.error().to_string();
  EXPECT_EQ(wrong->status, 400) << wrong->body;
  EXPECT_FALSE(fs::exists(file_of(digest_of("other"))));
  auto stored = admin_->upload("PUT", "/v1/workspaces/" + digest + "?project=default", (dir / "sent").string(), kOctets);
  ASSERT_TRUE(stored) << stored.error().to_string();
  ASSERT_EQ(stored->status, 201) << stored->body;
  auto again = admin_->upload("PUT", "/v1/workspaces/" + digest + "?project=default", (dir / "sent").string(), kOctets);
  ASSERT_TRUE(again) << again.error().to_string();
  EXPECT_EQ(again->status, 200) << again->body;
  auto fetched = admin_->download("/v1/workspaces/" + digest, (dir / "fetched").string());
  ASSERT_TRUE(fetched) << fetched.error().to_string();
  ASSERT_EQ(fetched->status, 200);
  EXPECT_EQ(fs::file_size(dir / "fetched"), bytes.size());
  EXPECT_EQ("sha256:" + auth::sha256_hex(slurp((dir / "fetched").string())), digest);

  const int64_t grown_kib = server_->peak_resident_kib() - before;
  RecordProperty("server_peak_growth_kib", std::to_string(grown_kib));
  EXPECT_LT(grown_kib, 24 << 10) << "the server's peak memory grew by " << grown_kib << " KiB for a 96 MiB workspace";
  std::error_code ec;
  EXPECT_TRUE(fs::is_empty(server_->data_dir() + "/workspaces/.incoming", ec)) << "no upload is left on its way in";
  fs::remove_all(dir);
}

class SmallUploadLimitTest : public WorkspacesTest {
 protected:
  void SetUp() override { start_server({"--max-upload-bytes", "65536"}); }
};

TEST_F(SmallUploadLimitTest, AWorkspaceOverTheUploadLimitGets413WithTheLimit) {
  std::string bytes = archive(70000);
  auto r = upload(*admin_, digest_of(bytes), "default", bytes);
  ASSERT_EQ(r.status, 413);
  EXPECT_THAT(r.body, HasSubstr("65536"));
  std::string fits = archive(65536);
  EXPECT_EQ(upload(*admin_, digest_of(fits), "default", fits).status, 201);
}

// A credential that does not verify is refused from the upload's head, before its body is read:
// the answer is 401 (not the 413 its size would earn), so no byte of it was taken in.
TEST_F(SmallUploadLimitTest, AnUploadWithAForgedTokenIsRefusedBeforeItsBody) {
  std::string bytes = archive(70000);
  std::string forged = server_->admin_token();
  forged.back() = forged.back() == 'A' ? 'B' : 'A';
  for (const std::string& token : {forged, std::string("not-a-jwt")}) {
    auto stranger = server_->client(token);
    auto r = upload(*stranger, digest_of(bytes), "default", bytes);
    EXPECT_EQ(r.status, 401) << token << " " << r.body;
    EXPECT_EQ(Json::parse(r.body)["error"]["code"], "unauthenticated") << r.body;
  }
  EXPECT_EQ(upload(*admin_, digest_of(bytes), "default", bytes).status, 413) << "a verified caller gets the size rule";
}

}  // namespace
}  // namespace cnlab::server::test_support

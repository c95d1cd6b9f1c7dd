// A migrating job's dump from agent to agent over mutual TLS (peer_endpoint.h), on loopback: node-a
// streams a dump to node-b's endpoint, which keeps it for the job until the runner takes it with
// the sender and digest the server names; nobody else gets a dump in or out.
#include "agent/peer_endpoint.h"

#include <gmock/gmock.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <map>

#include "agent/files/files.h"
#include "common/json_reader.h"
#include "net/net.h"
#include "test_cluster_ca.h"

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class PeerEndpointTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/cnlab-peer-XXXXXX";
    dir_ = ::mkdtemp(name);
    ca_ = std::make_unique<TestClusterCa>(dir_ / "cluster");
    node_a_ = ca_->node("node-a");
    auto endpoint = start_endpoint();
    ASSERT_TRUE(endpoint) << endpoint.error().to_string();
    endpoint_ = std::move(*endpoint);
    // A dump: its images and the job's files, packed as the source packs it.
    fs::create_directories(dir_ / "dump" / "images");
    std::ofstream(dir_ / "dump" / "images" / "pages-1.img") << "memory pages";
    std::ofstream(dir_ / "dump" / "process.json") << R"({"node":"node-a"})";
    PackOptions options;
    options.output_path = (dir_ / "dump.tar.gz").string();
    options.workspace_rules = false;
    auto packed = pack_workspace((dir_ / "dump").string(), options);
    ASSERT_TRUE(packed) << packed.error().to_string();
    digest_ = packed->digest;
    std::ifstream in(options.output_path, std::ios::binary);
    archive_.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }
  void TearDown() override { fs::remove_all(dir_); }

  // node-b's endpoint; the moves it is told were asked for: those `moves_` lists (job -> source),
  // each question counted.
  Result<std::unique_ptr<PeerEndpoint>> start_endpoint() {
    return PeerEndpoint::start("127.0.0.1:0", ca_->node("node-b"), dir_ / "incoming", 1 << 20,
                               [this](const std::string& job, const std::string& from) -> Status {
                                 ++asked_;
                                 auto move = moves_.find(job);
                                 if (move == moves_.end() || move->second != from) {
                                   return Error::of(ErrorCode::kPermissionDenied, "job", job, "the server has no such move");
                                 }
                                 return Status::ok();
                               });
  }

  // Sends `archive` (its bytes) as the source does: from a file.
  Status send(const NodeTls& from, const std::string& job, const std::string& archive, const std::string& digest,
              const std::string& target = "node-b") {
    const fs::path file = dir_ / "sent.archive";
    std::ofstream(file, std::ios::binary | std::ios::trunc) << archive;
    auto sender = DumpSender::connect({"127.0.0.1", endpoint_->port()}, target, from);
    if (!sender) return sender.error();
    return (*sender)->send_archive(job, file, digest);
  }

  // Sends the directory `dump` as the source does: its files of `min_bytes` or more as parts, then
  // the rest packed. The archive's digest, or the error.
  Result<std::string> send_with_parts(const std::string& job, const fs::path& dump, int64_t min_bytes) {
    auto sender = DumpSender::connect({"127.0.0.1", endpoint_->port()}, "node-b", node_a_);
    if (!sender) return sender.error();
    auto parts = (*sender)->send_parts(job, dump, min_bytes);
    if (!parts) return parts.error();
    return send_packed(**sender, job, dump);
  }
  Result<std::string> send_packed(DumpSender& sender, const std::string& job, const fs::path& dump) {
    PackOptions options;
    options.output_path = (dir_ / "rest.tar").string();
    options.workspace_rules = false;
    options.compression_level = 0;
    auto packed = pack_workspace(dump.string(), options);
    if (!packed) return packed.error();
    if (auto sent = sender.send_archive(job, options.output_path, packed->digest); !sent) return sent.error();
    return packed->digest;
  }

  // What the endpoint left in its directory besides the dumps it keeps (spooled bodies, archives,
  // parts).
  std::vector<std::string> leftovers() {
    std::vector<std::string> found;
    for (const auto& entry : fs::directory_iterator(dir_ / "incoming")) {
      const std::string name = entry.path().filename().string();
      const auto extension = entry.path().extension();
      if (name.starts_with(".request-") || extension == ".archive" || extension == ".parts") found.push_back(name);
    }
    return found;
  }

  static std::string read(const fs::path& file) {
    std::ifstream in(file, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  fs::path dir_;
  std::map<std::string, std::string> moves_ = {{"job-1", "node-a"}, {"job-2", "node-a"}, {"job-3", "node-a"},
                                               {"..%2F..%2Fetc", "node-a"}};
  std::atomic<int> asked_{0};
  std::unique_ptr<TestClusterCa> ca_;
  NodeTls node_a_;
  std::unique_ptr<PeerEndpoint> endpoint_;
  std::string archive_, digest_;
};

TEST_F(PeerEndpointTest, ADumpSentByTheSourceIsTakenWithItsSenderAndDigest) {
  auto sent = send(node_a_, "job-1", archive_, digest_);
  ASSERT_TRUE(sent) << sent.error().to_string();
  EXPECT_EQ(take_incoming_dump(dir_ / "incoming", "job-1", "node-c", digest_, dir_ / "restored").error().code,
            ErrorCode::kNotFound)
      << "only from the node the server names";
  const std::string other_digest = "sha256:" + std::string(64, '0');
  EXPECT_EQ(take_incoming_dump(dir_ / "incoming", "job-1", "node-a", other_digest, dir_ / "restored").error().code,
            ErrorCode::kNotFound)
      << "only with the digest the server names";
  EXPECT_EQ(fs::status(dir_ / "incoming").permissions() & fs::perms::all, fs::perms::owner_all)
      << "a dump holds a job's memory: no one but the agent reads it";
  auto taken = take_incoming_dump(dir_ / "incoming", "job-1", "node-a", digest_, dir_ / "restored");
  ASSERT_TRUE(taken) << taken.error().to_string();
  std::ifstream pages(dir_ / "restored" / "images" / "pages-1.img");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(pages), std::istreambuf_iterator<char>()), "memory pages");
  EXPECT_FALSE(take_incoming_dump(dir_ / "incoming", "job-1", "node-a", digest_, dir_ / "again")) << "taken once";
  EXPECT_THAT(leftovers(), ::testing::IsEmpty());
}

TEST_F(PeerEndpointTest, AnEndpointStartingClearsWhatACrashLeftAndKeepsTheDumpsItHolds) {
  ASSERT_TRUE(send(node_a_, "job-1", archive_, digest_));
  std::ofstream(dir_ / "incoming" / ".request-1-2-3") << "half a body";
  std::ofstream(dir_ / "incoming" / "job-2.archive") << "an archive never unpacked";
  fs::create_directories(dir_ / "incoming" / "job-3.parts");
  std::ofstream(dir_ / "incoming" / "job-3.parts" / std::string(64, 'a')) << "a part whose dump never came";
  endpoint_.reset();
  auto restarted = start_endpoint();
  ASSERT_TRUE(restarted) << restarted.error().to_string();
  EXPECT_THAT(leftovers(), ::testing::IsEmpty());
  EXPECT_TRUE(take_incoming_dump(dir_ / "incoming", "job-1", "node-a", digest_, dir_ / "restored"));
}

TEST_F(PeerEndpointTest, AStrangerOrAWrongTargetGetsNoDumpThrough) {
  TestClusterCa other(dir_ / "other");
  EXPECT_FALSE(send(other.node("node-a"), "job-1", archive_, digest_)) << "a certificate from another cluster's CA";
  NodeTls none = node_a_;
  none.cert_file = none.key_file = "";
  EXPECT_FALSE(send(none, "job-1", archive_, digest_)) << "no certificate at all";
  auto wrong = send(node_a_, "job-1", archive_, digest_, "node-c");
  ASSERT_FALSE(wrong) << "the endpoint is node-b's, not the target's";
  EXPECT_THAT(wrong.error().message, HasSubstr("node-c.node.cnlab"));
  EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-1.json"));
}

// A node with a valid certificate still gets nothing in for a move the server did not ask for, or
// asked of another source: refused from the request's head, before any of its body is stored.
TEST_F(PeerEndpointTest, ADumpOfAMoveTheServerDidNotAskForIsRefusedBeforeItsBody) {
  moves_ = {{"job-1", "node-c"}};
  auto from_wrong_source = send(node_a_, "job-1", archive_, digest_);
  ASSERT_FALSE(from_wrong_source);
  EXPECT_EQ(from_wrong_source.error().code, ErrorCode::kPermissionDenied) << from_wrong_source.error().to_string();
  EXPECT_THAT(from_wrong_source.error().message, HasSubstr("no move of this job from node-a"));
  auto never_asked = send_with_parts("job-9", dir_ / "dump", 4);
  ASSERT_FALSE(never_asked);
  EXPECT_EQ(never_asked.error().code, ErrorCode::kPermissionDenied) << never_asked.error().to_string();
  EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-1.json"));
  EXPECT_THAT(leftovers(), ::testing::IsEmpty()) << "nothing of a refused dump is kept";

  // Once asked for, the dump and each of its parts get in, and the server is asked once.
  moves_ = {{"job-1", "node-a"}};
  asked_ = 0;
  auto sent = send_with_parts("job-1", dir_ / "dump", 4);
  ASSERT_TRUE(sent) << sent.error().to_string();
  EXPECT_EQ(asked_, 1);
  EXPECT_TRUE(take_incoming_dump(dir_ / "incoming", "job-1", "node-a", *sent, dir_ / "restored"));
}

TEST_F(PeerEndpointTest, ADumpThatDoesNotMatchItsDigestOrAHostileJobNameIsRefused) {
  std::string changed = archive_;
  changed[changed.size() / 2] ^= 1;
  auto corrupt = send(node_a_, "job-1", changed, digest_);
  ASSERT_FALSE(corrupt);
  EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-1.json"));
  auto climbing = send(node_a_, "..%2F..%2Fetc", archive_, digest_);
  ASSERT_FALSE(climbing);
  EXPECT_EQ(climbing.error().code, ErrorCode::kInvalidArgument) << climbing.error().to_string();
  auto too_big = send(node_a_, "job-2", std::string(2 << 20, 'x'), digest_);
  ASSERT_FALSE(too_big);
  EXPECT_EQ(too_big.error().code, ErrorCode::kTooLarge) << too_big.error().to_string();
  EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-2.json"));
  EXPECT_THAT(leftovers(), ::testing::IsEmpty()) << "a refused dump leaves nothing behind";
}

TEST_F(PeerEndpointTest, LargeFilesTravelAsPartsAndArePutBackWhereTheyWere) {
  const fs::path dump = dir_ / "big-dump";
  fs::create_directories(dump / "images");
  fs::create_directories(dump / "tree" / "work");
  const std::string pages(300 << 10, 'p'), other(200 << 10, 'q');
  std::ofstream(dump / "images" / "pages-1.img", std::ios::binary) << pages;
  std::ofstream(dump / "images" / "pages-2.img", std::ios::binary) << pages;  // the same content twice
  std::ofstream(dump / "tree" / "work" / "model.bin", std::ios::binary) << other;
  fs::permissions(dump / "tree" / "work" / "model.bin", fs::perms::owner_all);
  std::ofstream(dump / "images" / "core-1.img") << "small";
  auto digest = send_with_parts("job-1", dump, 100 << 10);
  ASSERT_TRUE(digest) << digest.error().to_string();
  EXPECT_FALSE(fs::exists(dump / "images" / "pages-1.img")) << "sent as a part, not packed again";
  auto taken = take_incoming_dump(dir_ / "incoming", "job-1", "node-a", *digest, dir_ / "restored");
  ASSERT_TRUE(taken) << taken.error().to_string();
  EXPECT_EQ(read(dir_ / "restored" / "images" / "pages-1.img"), pages);
  EXPECT_EQ(read(dir_ / "restored" / "images" / "pages-2.img"), pages);
  EXPECT_EQ(read(dir_ / "restored" / "tree" / "work" / "model.bin"), other);
  EXPECT_EQ(read(dir_ / "restored" / "images" / "core-1.img"), "small");
  EXPECT_EQ(fs::status(dir_ / "restored" / "tree" / "work" / "model.bin").permissions() & fs::perms::all,
            fs::perms::owner_all);
  EXPECT_FALSE(fs::exists(dir_ / "restored" / kDumpPartsFile)) << "the list of parts is the endpoint's, not the job's";
  EXPECT_THAT(leftovers(), ::testing::IsEmpty());
}

TEST_F(PeerEndpointTest, AListOfPartsThatClimbsOutOrNamesAPartThatNeverCameIsRefused) {
  const fs::path dump = dir_ / "hostile";
  fs::create_directories(dump / "images");
  std::ofstream(dump / "images" / "pages-1.img", std::ios::binary) << std::string(300 << 10, 'p');
  auto sender = DumpSender::connect({"127.0.0.1", endpoint_->port()}, "node-b", node_a_);
  ASSERT_TRUE(sender) << sender.error().to_string();
  ASSERT_TRUE((*sender)->send_parts("job-1", dump, 100 << 10));
  Json list = Json::parse(read(dump / kDumpPartsFile));
  const std::string sha256 = list["parts"][0]["sha256"];
  for (const Json& parts : {Json::array({{{"path", "../../escaped"}, {"mode", 420}, {"sha256", sha256}}}),
                            Json::array({{{"path", "images/pages-1.img"}, {"mode", 420}, {"sha256", std::string(64, 'b')}}}),
                            Json::array({{{"path", "images/pages-1.img"}, {"mode", "rw"}, {"sha256", sha256}}})}) {
    std::ofstream(dump / kDumpPartsFile, std::ios::trunc) << Json{{"parts", parts}}.dump();
    auto sent = send_packed(**sender, "job-1", dump);
    ASSERT_FALSE(sent) << parts.dump();
    EXPECT_EQ(sent.error().code, ErrorCode::kInvalidArgument) << sent.error().to_string();
    EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-1.json")) << parts.dump();
    EXPECT_FALSE(fs::exists(dir_ / "incoming" / "job-1")) << parts.dump();
    EXPECT_FALSE(fs::exists(dir_ / "escaped"));
  }
  EXPECT_THAT(leftovers(), ::testing::IsEmpty()) << "a refused dump's parts are removed with it";
}

TEST_F(PeerEndpointTest, AnythingButADumpOrAPartIsNotFound) {
  net::ClientOptions options;
  options.url = "https://127.0.0.1:" + std::to_string(endpoint_->port());
  options.ca_file = node_a_.ca_file;
  options.cert_file = node_a_.cert_file;
  options.key_file = node_a_.key_file;
  options.server_name = net::node_dns_name("node-b");
  auto client = net::Client::connect(options);
  ASSERT_TRUE(client) << client.error().to_string();
  for (const std::string target : {"/v1/migrations/job-1/pieces", "/v1/migrations//parts", "/v1/other/job-1"}) {
    auto answered = (*client)->request("PUT", target, "pages");
    ASSERT_TRUE(answered) << answered.error().to_string();
    EXPECT_NE(answered->status / 100, 2) << target << " " << answered->body;
  }
  EXPECT_THAT(leftovers(), ::testing::IsEmpty());
}

}  // namespace
}  // namespace cnlab::agent

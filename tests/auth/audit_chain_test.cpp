#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fmt/format.h>

#include "auth/auth.h"

namespace cnlab::auth {
namespace {

using ::testing::HasSubstr;

// A chain of `count` records made the way the store makes them on commit.
std::vector<AuditLink> make_chain(int count) {
  std::vector<AuditLink> links;
  std::string prev = kGenesisHash;
  for (int seq = 1; seq <= count; ++seq) {
    AuditLink link{seq, fmt::format(R"({{"seq":{},"action":"job.create","job":"train-{}"}})", seq, seq), prev, ""};
    link.hash = chain_hash(link.prev_hash, link.record);
    prev = link.hash;
    links.push_back(link);
  }
  return links;
}

TEST(AuditChain, HashIsSha256OfPrevNewlineRecord) {
  // Pinned: the store computes exactly this on commit, so the formula must not drift.
  EXPECT_EQ(chain_hash(kGenesisHash, R"({"seq":1,"action":"login"})"),
            "b79b95eb2b693a61dfa6879872e3f92ea254480862f5e7abb611a82d25db7b70");
  EXPECT_EQ(kGenesisHash, std::string(64, '0'));
}

TEST(AuditChain, IntactChainPasses) {
  EXPECT_EQ(verify_chain(make_chain(6)), std::nullopt);
  EXPECT_EQ(verify_chain({}), std::nullopt);
}

TEST(AuditChain, EditedRecordIsDetectedAtItsSeq) {
  auto links = make_chain(6);
  links[2].record = R"({"seq":3,"action":"job.create","job":"innocent"})";
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 3);
  EXPECT_THAT(problem->what, HasSubstr("edited"));
}

TEST(AuditChain, DeletedRecordIsDetectedAtTheSeqFoundInItsPlace) {
  auto links = make_chain(6);
  links.erase(links.begin() + 2);  // seq 3
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 4);
  EXPECT_EQ(problem->what, "deleted or reordered (expected seq 3, found 4)");
}

TEST(AuditChain, DeletedRecordWithRenumberedSeqsIsDetectedByTheBrokenLink) {
  // Hiding the gap by renumbering still leaves prev_hash pointing at the deleted record.
  auto links = make_chain(6);
  links.erase(links.begin() + 2);
  for (size_t i = 0; i < links.size(); ++i) links[i].seq = static_cast<int64_t>(i) + 1;
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 3);
  EXPECT_THAT(problem->what, HasSubstr("prev_hash does not match the hash of seq 2"));
}

TEST(AuditChain, SwappedRecordsAreDetected) {
  auto links = make_chain(6);
  std::swap(links[1], links[2]);  // seq 3 now comes before seq 2
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 3);
  EXPECT_EQ(problem->what, "deleted or reordered (expected seq 2, found 3)");
}

TEST(AuditChain, EditedHashIsDetectedAtItsSeq) {
  auto links = make_chain(6);
  links[3].hash[10] = links[3].hash[10] == 'a' ? 'b' : 'a';
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 4);
  EXPECT_THAT(problem->what, HasSubstr("edited"));
}

TEST(AuditChain, RewrittenRecordWithRecomputedHashIsCaughtByTheNextLink) {
  auto links = make_chain(6);
  links[3].record = "forged";
  links[3].hash = chain_hash(links[3].prev_hash, links[3].record);
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 5);
  EXPECT_THAT(problem->what, HasSubstr("prev_hash does not match the hash of seq 4"));
}

TEST(AuditChain, ChainNotStartingAtGenesisIsRefused) {
  auto links = make_chain(3);
  links[0].prev_hash = std::string(64, 'f');
  links[0].hash = chain_hash(links[0].prev_hash, links[0].record);
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 1);
  EXPECT_THAT(problem->what, HasSubstr("genesis"));
}

TEST(AuditChain, ChainWithoutItsFirstRecordIsRefused) {
  auto links = make_chain(3);
  links.erase(links.begin());
  auto problem = verify_chain(links);
  ASSERT_TRUE(problem);
  EXPECT_EQ(problem->seq, 2);
  EXPECT_EQ(problem->what, "deleted or reordered (expected seq 1, found 2)");
}

}  // namespace
}  // namespace cnlab::auth

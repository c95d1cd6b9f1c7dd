// Who holds which blocks of a GPU, and the bar `cnlab gpus` draws of it.
#include <gmock/gmock.h>

#include "cli/block_bar.h"

namespace cnlab::cli {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string bar_of(const BlockMap& map, const std::string& node, int gpu) {
  const GpuBlocks* blocks = map.find(node, gpu);
  return blocks ? bar_text(bar_cells(*blocks)) : free_bar();
}

TEST(BlockBar, TwoJobsOnOneGpuFillFromTheLeftInTheOrderGiven) {
  BlockMap map = build_block_map({{"train", "gpu-1", 0, 50}, {"eval", "gpu-1", 0, 25}});
  EXPECT_THAT(map.jobs, ElementsAre("train", "eval"));
  ASSERT_NE(map.find("gpu-1", 0), nullptr);
  EXPECT_EQ(map.find("gpu-1", 0)->held, 75);
  EXPECT_EQ(map.find("gpu-1", 0)->owners[49], 0);
  EXPECT_EQ(map.find("gpu-1", 0)->owners[50], 1);
  EXPECT_EQ(map.find("gpu-1", 0)->owners[75], -1);
  EXPECT_EQ(bar_of(map, "gpu-1", 0), "[AAAAAAAAAAbbbbb.....]");
}

TEST(BlockBar, AGangHoldsEveryGpuWholeWithOneLetter) {
  BlockMap map = build_block_map({{"wide", "gpu-1", 0, 100}, {"wide", "gpu-1", 1, 100}, {"wide", "gpu-2", 0, 100}});
  EXPECT_THAT(map.jobs, ElementsAre("wide"));
  EXPECT_EQ(bar_of(map, "gpu-1", 0), "[AAAAAAAAAAAAAAAAAAAA]");
  EXPECT_EQ(bar_of(map, "gpu-1", 1), "[AAAAAAAAAAAAAAAAAAAA]");
  EXPECT_EQ(bar_of(map, "gpu-2", 0), "[AAAAAAAAAAAAAAAAAAAA]");
  EXPECT_EQ(map.find("gpu-2", 1), nullptr);
  EXPECT_EQ(bar_of(map, "gpu-2", 1), "[....................]");
}

TEST(BlockBar, AMigInstanceSitsWhereItsFirstMemorySlotIsEvenWhenListedLast) {
  // Slot 4 of 8 is the GPU's second half; the plain holding takes the lowest free blocks.
  BlockMap map = build_block_map({{"small", "gpu-1", 0, 20}, {"mig", "gpu-1", 0, 42, /*mig_start=*/4}});
  const GpuBlocks* gpu = map.find("gpu-1", 0);
  ASSERT_NE(gpu, nullptr);
  EXPECT_EQ(gpu->owners[50], 1);
  EXPECT_EQ(gpu->owners[91], 1);
  EXPECT_EQ(gpu->owners[92], -1);
  EXPECT_EQ(gpu->owners[0], 0);
  EXPECT_EQ(gpu->owners[19], 0);
  EXPECT_EQ(gpu->owners[20], -1);
  EXPECT_EQ(bar_of(map, "gpu-1", 0), "[AAAA......bbbbbbbb..]");
}

TEST(BlockBar, ATinyHoldingBesideABigOneStillShowsOnce) {
  BlockMap map = build_block_map({{"big", "gpu-1", 0, 49}, {"tiny", "gpu-1", 0, 1}, {"big2", "gpu-1", 0, 50}});
  std::string bar = bar_of(map, "gpu-1", 0);
  EXPECT_EQ(bar.size(), 22u);
  EXPECT_EQ(std::count(bar.begin(), bar.end(), 'b'), 1) << bar;
  EXPECT_EQ(bar, "[AAAAAAAAAbCCCCCCCCCC]");
}

TEST(BlockBar, BlocksBeyondAHundredAreCountedAsOverflowNotDrawn) {
  BlockMap map = build_block_map({{"a", "n", 0, 80}, {"b", "n", 0, 30}});
  EXPECT_EQ(map.find("n", 0)->held, 100);
  EXPECT_EQ(map.find("n", 0)->overflow, 10);
}

TEST(BlockBar, LettersAlternateCaseThenDigitsThenAStar) {
  EXPECT_EQ(job_letter(0), 'A');
  EXPECT_EQ(job_letter(1), 'b');
  EXPECT_EQ(job_letter(2), 'C');
  EXPECT_EQ(job_letter(25), 'z');
  EXPECT_EQ(job_letter(26), 'a');
  EXPECT_EQ(job_letter(27), 'B');
  EXPECT_EQ(job_letter(51), 'Z');
  EXPECT_EQ(job_letter(52), '0');
  EXPECT_EQ(job_letter(61), '9');
  EXPECT_EQ(job_letter(62), '*');
  EXPECT_EQ(job_letter(-1), '.');
  // The first 62 are all different.
  std::string seen;
  for (int i = 0; i < 62; ++i) seen += job_letter(i);
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(std::unique(seen.begin(), seen.end()), seen.end());
}

TEST(BlockBar, HoldingsComeFromAJobsPlacement) {
  Json job = Json::parse(R"({"metadata": {"name": "wide-1"}, "status": {"phase": "Running", "placement": [
      {"node": "gpu-1", "gpus": [{"index": 0, "blocks": 100, "vram_mib": 81920}, {"index": 1, "blocks": 42, "vram_mib": 40960, "mig_start": 4}]},
      {"node": "gpu-2", "gpus": [{"index": 3, "blocks": 100, "vram_mib": 81920}]}]}})");
  std::vector<Holding> h = holdings_of(job);
  ASSERT_EQ(h.size(), 3u);
  EXPECT_EQ(h[0].job, "wide-1");
  EXPECT_EQ(h[1].node, "gpu-1");
  EXPECT_EQ(h[1].gpu, 1);
  EXPECT_EQ(h[1].blocks, 42);
  EXPECT_EQ(h[1].mig_start, 4);
  EXPECT_EQ(h[0].mig_start, -1);
  EXPECT_EQ(h[2].node, "gpu-2");
  EXPECT_EQ(h[2].gpu, 3);
  EXPECT_TRUE(holdings_of(Json::parse(R"({"metadata": {"name": "p"}, "status": {"phase": "Pending"}})")).empty());
}

TEST(BlockBar, ManyJobsOnOneGpuEachGetTheirOwnLetter) {
  std::vector<Holding> holdings;
  for (int i = 0; i < 4; ++i) holdings.push_back({"job-" + std::to_string(i), "n", 0, 25});
  BlockMap map = build_block_map(holdings);
  EXPECT_EQ(bar_of(map, "n", 0), "[AAAAAbbbbbCCCCCddddd]");
}

}  // namespace
}  // namespace cnlab::cli

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

SliceRequest parse_ok(std::string_view text, std::string_view vram = {}) {
  auto r = parse_slice(text, vram);
  EXPECT_TRUE(r) << text << ": " << (r ? "" : r.error().to_string());
  return r ? *r : SliceRequest{};
}

std::string parse_error(std::string_view text, std::string_view vram = {}) {
  auto r = parse_slice(text, vram);
  EXPECT_FALSE(r) << text << " parsed as " << (r ? to_string(*r) : "");
  return r ? "" : r.error().to_string();
}

TEST(SliceRequest, BlocksOfOneModel) {
  auto r = parse_ok("h100-25");
  EXPECT_EQ(r.kind, SliceKind::kBlocks);
  EXPECT_EQ(r.models, model_bit(*find_model("h100")));
  EXPECT_EQ(r.blocks, 25);
  EXPECT_EQ(r.gpu_count, 1);
}

TEST(SliceRequest, WholeGpusAndGangs) {
  auto one = parse_ok("h100");
  EXPECT_EQ(one.kind, SliceKind::kWhole);
  EXPECT_EQ(one.total_blocks(), 100);
  auto gang = parse_ok("h100x8");
  EXPECT_EQ(gang.kind, SliceKind::kWhole);
  EXPECT_EQ(gang.gpu_count, 8);
  EXPECT_EQ(parse_ok("h100-100"), one) << "100 blocks is a whole GPU";
}

TEST(SliceRequest, MigInstanceTakesTheProfilesBlocks) {
  auto r = parse_ok("h100:3g.40gb");
  EXPECT_EQ(r.kind, SliceKind::kMig);
  EXPECT_EQ(r.profile().name, "3g.40gb");
  EXPECT_EQ(r.blocks, 42);
}

TEST(SliceRequest, AnyModelAndModelAlternatives) {
  EXPECT_EQ(parse_ok("any-10").models, 0u);
  auto either = parse_ok("V100M16|v100m32-50");
  EXPECT_TRUE(mask_allows(either.models, *find_model("v100m32")));
  EXPECT_FALSE(mask_allows(either.models, *find_model("h100")));
}

TEST(SliceRequest, LongestModelNameWins) {
  EXPECT_EQ(parse_ok("h100nvl-10").models, model_bit(*find_model("h100nvl")));
  EXPECT_EQ(parse_ok("l40s-10").models, model_bit(*find_model("l40s")));
  EXPECT_EQ(parse_ok("l4x2").gpu_count, 2);
  EXPECT_EQ(parse_ok("mi300xx8").gpu_count, 8) << "mi300x is the model, x8 the count";
}

TEST(SliceRequest, VramQuotaForBlockSlices) {
  auto r = parse_ok("h100-25", "30Gi");
  EXPECT_EQ(r.vram_mib, 30 * 1024);
  EXPECT_THAT(parse_error("h100x2", "30Gi"), HasSubstr("applies to block slices"));
  EXPECT_THAT(parse_error("h100-10", "90Gi"), HasSubstr("more than the largest GPU of h100 holds (80Gi)"));
  EXPECT_THAT(parse_error("g2-10", "8Gi"), HasSubstr("undisclosed"));
}

TEST(SliceRequest, NoneAsksForHostResourcesOnly) {
  auto r = parse_ok("none");
  EXPECT_EQ(r.kind, SliceKind::kNone);
  EXPECT_EQ(r.total_blocks(), 0);
  EXPECT_THAT(parse_error("none", "1Gi"), HasSubstr("a VRAM quota needs a GPU"));
  EXPECT_THAT(parse_error("none-5"), HasSubstr("unknown GPU model"));
}

TEST(SliceRequest, PrinterAndParserRoundTrip) {
  for (auto [gpu, vram] : std::initializer_list<std::pair<std::string_view, std::string_view>>{
           {"h100-25", ""}, {"h100", ""}, {"h100x8", ""}, {"h100:3g.40gb", ""}, {"any-10", ""}, {"any", ""},
           {"anyx4", ""}, {"h200:1g.18gb", ""}, {"v100m16|v100m32-46", ""}, {"h100-25", "30Gi"}, {"none", ""},
           {"a100m80-7", "1500Mi"}, {"mi300xx8", ""}, {"H100-25", ""}, {"h100-100", ""}}) {
    SliceRequest r = parse_ok(gpu, vram);
    auto again = parse_slice(to_string(r), vram_text(r));
    ASSERT_TRUE(again) << to_string(r);
    EXPECT_EQ(*again, r) << gpu << " printed as " << to_string(r);
  }
  EXPECT_EQ(to_string(parse_ok("H100-25")), "h100-25");
}

TEST(SliceRequest, UnknownModelListsTheCatalog) {
  std::string e = parse_error("h900-25");
  EXPECT_THAT(e, HasSubstr("unknown GPU model \"h900\""));
  EXPECT_THAT(e, HasSubstr("known models: a10, a100m40"));
  EXPECT_THAT(e, HasSubstr("or any"));
  EXPECT_THAT(parse_error("h900x8"), HasSubstr("\"h900\""));
}

TEST(SliceRequest, BlocksOutOfRangeAreRefusedWithTheReason) {
  EXPECT_THAT(parse_error("h100-0"), HasSubstr("blocks must be 1..100"));
  EXPECT_THAT(parse_error("h100-101"), HasSubstr("ask for whole GPUs, e.g. h100x2"));
  EXPECT_THAT(parse_error("h100-ab"), HasSubstr("blocks \"ab\" is not a whole number"));
  EXPECT_THAT(parse_error("h100-"), HasSubstr("not a whole number"));
}

TEST(SliceRequest, GangSizeOutOfRangeIsRefused) {
  EXPECT_THAT(parse_error("h100x0"), HasSubstr("GPU count must be 1..1024"));
  EXPECT_THAT(parse_error("h100x5000"), HasSubstr("GPU count must be 1..1024"));
}

TEST(SliceRequest, MigProfileOnANonMigModelIsRefused) {
  EXPECT_THAT(parse_error("l4:1g.10gb"), HasSubstr("l4 does not support MIG"));
  EXPECT_THAT(parse_error("h100:3g.20gb"), HasSubstr("its profiles: 1g.10gb"));
  EXPECT_THAT(parse_error("any:1g.10gb"), HasSubstr("needs exactly one model"));
}

TEST(SliceRequest, ErrorNamesTheFlagAndTheValue) {
  auto r = parse_slice("h100-0");
  ASSERT_FALSE(r);
  EXPECT_EQ(r.error().field, "--gpu");
  EXPECT_EQ(r.error().value, "h100-0");
  EXPECT_EQ(parse_slice("h100-5", "lots").error().field, "--vram");
  EXPECT_THAT(parse_error(""), HasSubstr("empty request"));
  EXPECT_THAT(parse_error("h100/2"), HasSubstr("unknown GPU model"));
  EXPECT_THAT(parse_error("h100+2"), HasSubstr("unknown GPU model"));
}

TEST(MemoryQuantity, BinaryAndDecimalUnits) {
  EXPECT_EQ(*parse_memory_mib("30Gi", "m"), 30 * 1024);
  EXPECT_EQ(*parse_memory_mib("512Mi", "m"), 512);
  EXPECT_EQ(*parse_memory_mib("1Ti", "m"), 1024 * 1024);
  EXPECT_EQ(*parse_memory_mib("30GiB", "m"), 30 * 1024);
  EXPECT_EQ(*parse_memory_mib("1G", "m"), 954) << "1e9 bytes rounds up to whole MiB";
  EXPECT_EQ(*parse_memory_mib("80gb", "m"), 76294);
  EXPECT_FALSE(parse_memory_mib("30", "m"));
  EXPECT_FALSE(parse_memory_mib("0Gi", "m"));
  EXPECT_FALSE(parse_memory_mib("-1Gi", "m"));
  EXPECT_FALSE(parse_memory_mib("30Xi", "m"));
  EXPECT_EQ(format_memory_mib(30 * 1024), "30Gi");
  EXPECT_EQ(format_memory_mib(1500), "1500Mi");
}

}  // namespace
}  // namespace cnlab::model

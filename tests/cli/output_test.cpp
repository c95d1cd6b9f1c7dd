// The CLI's printing helpers: -o parsing, the Table, colour decisions, durations and sizes.
#include <gmock/gmock.h>

#include <cstdlib>

#include "cli/exit_codes.h"
#include "cli/output.h"

namespace cnlab::cli {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

TEST(OutputFormat, TableJsonAndNameAreKnownAndTableIsTheDefault) {
  EXPECT_EQ(*parse_output_format(""), OutputFormat::kTable);
  EXPECT_EQ(*parse_output_format("table"), OutputFormat::kTable);
  EXPECT_EQ(*parse_output_format("json"), OutputFormat::kJson);
  EXPECT_EQ(*parse_output_format("name"), OutputFormat::kName);
}

TEST(OutputFormat, AnUnknownFormatIsAUsageErrorNamingTheFlagAndTheChoices) {
  auto bad = parse_output_format("yaml");
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "-o");
  EXPECT_EQ(bad.error().value, "yaml");
  EXPECT_THAT(bad.error().message, HasSubstr("table, json or name"));
  EXPECT_EQ(exit_code_for(bad.error().code), kExitUsage);
}

TEST(OutputFormat, NameIsRefusedWhereACommandPrintsNoIds) {
  auto bad = parse_output_format("name", /*allow_name=*/false);
  ASSERT_FALSE(bad);
  EXPECT_THAT(bad.error().message, HasSubstr("table or json"));
}

TEST(Table, ColumnsAlignLeftOrRightUnderTheirHeaders) {
  Table table({{"JOB"}, {"AGE", Table::Align::kRight}, {"PHASE"}});
  table.row();
  table.cell("train-1");
  table.cell("3m12s");
  table.cell("Running");
  table.row();
  table.cell("a");
  table.cell("5s");
  table.cell("Pending");
  EXPECT_EQ(table.render(false),
            "JOB        AGE  PHASE\n"
            "train-1  3m12s  Running\n"
            "a           5s  Pending\n");
}

TEST(Table, AShortRowIsFilledWithEmptyCells) {
  Table table({{"A"}, {"B"}, {"C"}});
  table.row();
  table.cell("x");
  table.row();
  table.cell("y");
  table.cell("z");
  table.cell("w");
  EXPECT_EQ(table.rows(), 2u);
  EXPECT_EQ(table.render(false), "A  B  C\nx\ny  z  w\n");
}

TEST(Table, NothingIsCutWhenTheTableFits) {
  Table table({{"NAME", Table::Align::kLeft, true}, {"X"}});
  table.row();
  table.cell("a-rather-long-name-here");
  table.cell("1");
  EXPECT_THAT(table.render(false, 200), HasSubstr("a-rather-long-name-here"));
  EXPECT_THAT(table.render(false, 0), HasSubstr("a-rather-long-name-here"));
}

TEST(Table, OnlyTruncatableColumnsAreCutAndOnlyAsMuchAsNeeded) {
  Table table({{"ID"}, {"REASON", Table::Align::kLeft, true}});
  table.row();
  table.cell("job-with-long-id");
  table.cell("needs 2 whole h100 on one node; the most free is 0");
  std::string out = table.render(false, 40);
  EXPECT_THAT(out, HasSubstr("job-with-long-id"));
  EXPECT_THAT(out, HasSubstr("…"));
  // Every line fits in 40 columns, and the cut line uses all of them.
  size_t start = 0;
  size_t widest = 0;
  while (start < out.size()) {
    size_t end = out.find('\n', start);
    widest = std::max(widest, display_width(std::string_view(out).substr(start, end - start)));
    start = end + 1;
  }
  EXPECT_EQ(widest, 40u);
}

TEST(Table, ColourWrapsTheCellButPaddingStaysOutsideAndTakesNoWidth) {
  Table table({{"PHASE"}, {"X"}});
  table.row();
  table.cell("Run", kGreen);
  table.cell("1");
  std::string coloured = table.render(true);
  EXPECT_THAT(coloured, HasSubstr("\033[32mRun\033[0m    1"));
  EXPECT_THAT(coloured, HasSubstr("\033[1mPHASE\033[0m"));
  EXPECT_THAT(table.render(false), Not(HasSubstr("\033[")));
}

TEST(DisplayWidth, EscapesTakeNoColumnsAndUtf8CountsCodePoints) {
  EXPECT_EQ(display_width("abc"), 3u);
  EXPECT_EQ(display_width("\033[31mab\033[0m"), 2u);
  EXPECT_EQ(display_width("…x"), 2u);
}

TEST(Colour, NeverOnAPipeOrAFile) {
  FILE* file = std::tmpfile();
  ::unsetenv("NO_COLOR");
  EXPECT_FALSE(colour_enabled(file));
  EXPECT_EQ(terminal_width(file), 0);
  std::fclose(file);
}

TEST(FormatAge, ShortFormsAtEveryScale) {
  EXPECT_EQ(format_age(Duration{0}), "0s");
  EXPECT_EQ(format_age(Duration{45}), "45s");
  EXPECT_EQ(format_age(Duration{192}), "3m12s");
  EXPECT_EQ(format_age(Duration{180}), "3m");
  EXPECT_EQ(format_age(Duration{42 * 60 + 7}), "42m");
  EXPECT_EQ(format_age(Duration{2 * 3600}), "2h");
  EXPECT_EQ(format_age(Duration{2 * 3600 + 5 * 60}), "2h5m");
  EXPECT_EQ(format_age(Duration{27 * 3600}), "27h");
  EXPECT_EQ(format_age(Duration{3 * 86400 + 4 * 3600}), "3d4h");
  EXPECT_EQ(format_age(Duration{12 * 86400}), "12d");
  EXPECT_EQ(format_age(Duration{-5}), "0s");
}

TEST(FormatBytes, BinaryUnitsOneDecimalOnlyWhenItTellsSomething) {
  EXPECT_EQ(format_bytes(0), "0 B");
  EXPECT_EQ(format_bytes(512), "512 B");
  EXPECT_EQ(format_bytes(4198), "4.1 KiB");
  EXPECT_EQ(format_bytes(int64_t{80} << 30), "80 GiB");
  EXPECT_EQ(format_bytes((int64_t{3} << 20) / 2), "1.5 MiB");
  EXPECT_EQ(format_bytes(int64_t{512} << 40), "512 TiB");
}

TEST(FormatTime, NearTimesShowTheClockAndUnsetShowsADash) {
  Time now = *parse_rfc3339("2026-12-01T15:00:00Z", "t");
  EXPECT_EQ(format_time(*parse_rfc3339("2026-12-01T14:05:00Z", "t"), now), "14:05");
  EXPECT_EQ(format_time(Time{}, now), "-");
  EXPECT_EQ(format_time(*parse_rfc3339("2026-11-20T14:05:00Z", "t"), now), "2026-11-20 14:05");
}

}  // namespace
}  // namespace cnlab::cli

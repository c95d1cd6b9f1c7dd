#include "agent/runtime/output_format.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

namespace cnlab::agent::output {
namespace {

using ::testing::ElementsAre;

constexpr const char* kStamp = "2026-12-01T03:26:01.123Z";

struct Record {
  char letter;
  std::string text;
  bool operator==(const Record&) const = default;
};

std::vector<Record> records(const std::string& out) {
  std::vector<Record> result;
  size_t start = 0;
  while (start < out.size()) {
    const size_t end = out.find('\n', start);
    const std::string line = out.substr(start, end - start);
    result.push_back({line[0], line.substr(kHeaderSize)});
    start = end + 1;
  }
  return result;
}

TEST(Timestamp, FormatsUtcWithMillisecondsAndParsesBack) {
  TimestampFormatter formatter;
  timespec at{};
  at.tv_sec = 1796095561;  // 2026-12-01T03:26:01Z
  at.tv_nsec = 123456789;
  EXPECT_EQ(std::string(formatter.format(at), kTimestampSize), "2026-12-01T03:26:01.123Z");
  at.tv_nsec = 7000000;
  EXPECT_EQ(std::string(formatter.format(at), kTimestampSize), "2026-12-01T03:26:01.007Z");

  const auto parsed = parse_timestamp("2026-12-01T03:26:01.123Z");
  ASSERT_TRUE(parsed);
  EXPECT_EQ(std::chrono::duration_cast<std::chrono::milliseconds>(parsed->time_since_epoch()).count(), 1796095561123LL);
}

TEST(Timestamp, ParseRefusesWhatTheShimNeverWrites) {
  EXPECT_FALSE(parse_timestamp("2026-12-01T03:26:01Z"));
  EXPECT_FALSE(parse_timestamp("2026-13-01T03:26:01.123Z"));
  EXPECT_FALSE(parse_timestamp("2026-12-01 03:26:01.123Z"));
  EXPECT_FALSE(parse_timestamp("2026-12-0xT03:26:01.123Z"));
}

TEST(Utf8, ValidTextPassesThroughUnchanged) {
  std::string out;
  using namespace std::string_literals;
  const std::string text = "plain ascii, caf\xC3\xA9, \xE2\x82\xAC, \xF0\x9F\x98\x80, tab\there, \r and NUL\0!"s;
  ASSERT_EQ(text.back(), '!');
  append_utf8_sanitized(out, text);
  EXPECT_EQ(out, text);
}

TEST(Utf8, EachInvalidByteBecomesOneReplacementCharacter) {
  std::string out;
  append_utf8_sanitized(out, std::string_view("a\xFF"
                                              "b\xC3(\xED\xA0\x80z\xC0\xAF",
                                              11));
  // \xFF: never valid; \xC3 then '(' : truncated; \xED\xA0\x80: a surrogate; \xC0\xAF: overlong.
  EXPECT_EQ(out,
            "a\uFFFD"
            "b\uFFFD(\uFFFD\uFFFD\uFFFDz\uFFFD\uFFFD");
}

TEST(Utf8, CompletePrefixStopsBeforeACharacterCutInTwo) {
  EXPECT_EQ(complete_utf8_prefix("ab\xE2\x82"), 2u);  // two of the euro sign's three bytes
  EXPECT_EQ(complete_utf8_prefix("ab\xE2\x82\xAC"), 5u);
  EXPECT_EQ(complete_utf8_prefix("ab\xF0"), 2u);
  EXPECT_EQ(complete_utf8_prefix("abc"), 3u);
  EXPECT_EQ(complete_utf8_prefix("ab\xFF"), 3u);  // invalid, not incomplete: nothing to wait for
}

TEST(LineSplitter, LinesSpanningSeveralReadsComeOutWhole) {
  LineSplitter splitter(OutputStream::kStdout);
  std::string out;
  splitter.feed("first\nsec", kStamp, out);
  splitter.feed("ond\n\nthi", kStamp, out);
  EXPECT_TRUE(splitter.has_pending());
  splitter.finish(kStamp, out);
  EXPECT_THAT(records(out),
              ElementsAre(Record{'O', "first"}, Record{'O', "second"}, Record{'O', ""}, Record{'O', "thi"}));
  EXPECT_EQ(out.substr(0, kHeaderSize), std::string("O ") + kStamp + " ");
}

TEST(LineSplitter, LineLongerThan64KiBIsSplitIntoPartialRecords) {
  LineSplitter splitter(OutputStream::kStderr);
  std::string out;
  const std::string line(150 * 1024, 'x');
  splitter.feed(line.substr(0, 70000), kStamp, out);  // past 64 KiB before its newline arrives
  splitter.feed(line.substr(70000) + "\n", kStamp, out);
  const auto parts = records(out);
  ASSERT_EQ(parts.size(), 3u);
  EXPECT_EQ(parts[0].letter, 'e');
  EXPECT_EQ(parts[0].text.size(), kMaxLineBytes);
  EXPECT_EQ(parts[1].letter, 'e');
  EXPECT_EQ(parts[1].text.size(), kMaxLineBytes);
  EXPECT_EQ(parts[2].letter, 'E');
  EXPECT_EQ(parts[2].text.size(), line.size() - 2 * kMaxLineBytes);
  EXPECT_FALSE(splitter.has_pending());
}

TEST(LineSplitter, SplitNeverCutsACharacter) {
  LineSplitter splitter(OutputStream::kStdout);
  std::string out;
  // 65535 ASCII bytes, then a 3-byte character straddling the 64 KiB mark.
  std::string line(kMaxLineBytes - 1, 'a');
  line += "\xE2\x82\xAC";
  line += "end\n";
  splitter.feed(line, kStamp, out);
  const auto parts = records(out);
  ASSERT_EQ(parts.size(), 2u);
  EXPECT_EQ(parts[0].text.size(), kMaxLineBytes - 1);
  EXPECT_EQ(parts[1].text,
            "\xE2\x82\xAC"
            "end");
}

TEST(LineSplitter, IdleFlushWritesAPartialRecordAndTheRestEndsTheLine) {
  LineSplitter splitter(OutputStream::kStdout);
  std::string out;
  splitter.feed("progress 45%\xE2\x82", kStamp, out);
  splitter.flush_partial(kStamp, out);
  EXPECT_TRUE(splitter.has_pending());  // the cut euro sign waits for its last byte
  splitter.feed("\xAC done\n", kStamp, out);
  EXPECT_THAT(records(out), ElementsAre(Record{'o', "progress 45%"}, Record{'O', "\xE2\x82\xAC done"}));
}

TEST(ParseRecord, ReadsStreamPartialFlagTimeAndText) {
  const std::string line = std::string("e ") + kStamp + " some text";
  const auto record = parse_record(line);
  ASSERT_TRUE(record);
  EXPECT_EQ(record->stream, OutputStream::kStderr);
  EXPECT_TRUE(record->partial);
  EXPECT_EQ(record->text, "some text");
  EXPECT_EQ(record->time, *parse_timestamp(kStamp));

  const std::string empty_line = std::string("O ") + kStamp + " ";
  const auto empty = parse_record(empty_line);
  ASSERT_TRUE(empty);
  EXPECT_EQ(empty->text, "");
  EXPECT_FALSE(empty->partial);
}

TEST(ParseRecord, RefusesMalformedRecords) {
  EXPECT_FALSE(parse_record(""));
  EXPECT_FALSE(parse_record(std::string("X ") + kStamp + " text"));
  EXPECT_FALSE(parse_record(std::string("O ") + kStamp));
  EXPECT_FALSE(parse_record("O 2026-12-01T03:26:01.12xZ text"));
}

}  // namespace
}  // namespace cnlab::agent::output

// OutputReader on files written by hand, the way the shim writes them (appends).
#include <fcntl.h>
#include <unistd.h>

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <thread>

#include "agent/runtime/output_format.h"
#include "agent/runtime/runtime.h"
#include "test_support.h"

namespace cnlab::agent {
namespace {

using ::testing::ElementsAre;
using namespace std::chrono_literals;
using testing::TempDir;
using testing::texts;

constexpr const char* kStamp = "2026-12-01T03:26:01.123Z";

std::string record(char letter, const std::string& text) {
  return std::string(1, letter) + " " + kStamp + " " + text + "\n";
}

void append(const std::filesystem::path& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(::write(fd, bytes.data(), bytes.size()), static_cast<ssize_t>(bytes.size()));
  ::close(fd);
}

class OutputReaderTest : public ::testing::Test {
 protected:
  TempDir dir_;
  std::filesystem::path file_ = dir_.path() / "output.log";
};

TEST_F(OutputReaderTest, ReturnsRecordsWithSequenceStreamTimeAndCursor) {
  append(file_, record('O', "one") + record('E', "two") + record('o', "thr") + record('O', "ee"));
  auto reader = OutputReader::open(file_);
  ASSERT_TRUE(reader) << reader.error().to_string();
  auto lines = reader->read();
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 4u);
  EXPECT_EQ((*lines)[0].seq, 1u);
  EXPECT_EQ((*lines)[0].stream, OutputStream::kStdout);
  EXPECT_EQ((*lines)[1].seq, 2u);
  EXPECT_EQ((*lines)[1].stream, OutputStream::kStderr);
  EXPECT_EQ((*lines)[1].text, "two");
  EXPECT_TRUE((*lines)[2].partial);
  EXPECT_FALSE((*lines)[3].partial);
  EXPECT_EQ((*lines)[0].time, *output::parse_timestamp(kStamp));
  const uint64_t first_size = record('O', "one").size();
  EXPECT_EQ((*lines)[0].cursor, (OutputCursor{1, first_size}));
  EXPECT_EQ(reader->cursor(), (OutputCursor{4, std::filesystem::file_size(file_)}));
  EXPECT_EQ(to_string((*lines)[1].stream), "stderr");
}

TEST_F(OutputReaderTest, HalfWrittenLastRecordIsReturnedOnlyOnceComplete) {
  const std::string whole = record('O', "complete") + record('E', "still being written");
  append(file_, whole.substr(0, whole.size() - 8));
  auto reader = OutputReader::open(file_);
  ASSERT_TRUE(reader);
  auto first = reader->read();
  ASSERT_TRUE(first);
  EXPECT_THAT(texts(*first), ElementsAre("complete"));
  auto nothing = reader->read();
  ASSERT_TRUE(nothing);
  EXPECT_TRUE(nothing->empty());

  append(file_, whole.substr(whole.size() - 8));
  auto second = reader->read();
  ASSERT_TRUE(second);
  ASSERT_EQ(second->size(), 1u);
  EXPECT_EQ((*second)[0].text, "still being written");
  EXPECT_EQ((*second)[0].seq, 2u);
}

TEST_F(OutputReaderTest, ResumesFromAPersistedCursorWithoutLossOrDuplicates) {
  append(file_, record('O', "a") + record('O', "b") + record('O', "c"));
  OutputCursor saved;
  {
    auto reader = OutputReader::open(file_);
    ASSERT_TRUE(reader);
    auto lines = reader->read(/*max_lines=*/2);
    ASSERT_TRUE(lines);
    ASSERT_EQ(lines->size(), 2u);
    saved = lines->back().cursor;
  }
  append(file_, record('E', "d"));
  auto resumed = OutputReader::open(file_, saved);
  ASSERT_TRUE(resumed) << resumed.error().to_string();
  auto rest = resumed->read();
  ASSERT_TRUE(rest);
  EXPECT_THAT(texts(*rest), ElementsAre("c", "d"));
  EXPECT_EQ(rest->front().seq, 3u);
  EXPECT_EQ(rest->back().seq, 4u);
}

TEST_F(OutputReaderTest, CursorInsideARecordOrPastTheEndIsRefused) {
  append(file_, record('O', "abc") + record('O', "def"));
  auto inside = OutputReader::open(file_, OutputCursor{1, 5});
  ASSERT_FALSE(inside);
  EXPECT_EQ(inside.error().field, "cursor.offset");
  EXPECT_EQ(inside.error().code, ErrorCode::kInvalidArgument);
  auto beyond = OutputReader::open(file_, OutputCursor{9, 100000});
  ASSERT_FALSE(beyond);
  EXPECT_EQ(beyond.error().field, "cursor.offset");
  auto missing = OutputReader::open(dir_.path() / "nope.log");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
}

TEST_F(OutputReaderTest, MalformedRecordIsSkippedButKeepsItsSequenceNumber) {
  append(file_, record('O', "good") + "garbage without a header\n" + record('E', "after"));
  auto reader = OutputReader::open(file_);
  ASSERT_TRUE(reader);
  auto lines = reader->read();
  ASSERT_TRUE(lines);
  ASSERT_EQ(lines->size(), 2u);
  EXPECT_EQ((*lines)[1].text, "after");
  EXPECT_EQ((*lines)[1].seq, 3u);
  EXPECT_EQ(reader->malformed(), 1u);
}

TEST_F(OutputReaderTest, ReadStopsAtMaxLinesAndWaitSaysMoreIsThere) {
  std::string many;
  for (int i = 0; i < 10; ++i) many += record('O', std::to_string(i));
  append(file_, many);
  auto reader = OutputReader::open(file_);
  ASSERT_TRUE(reader);
  auto first = reader->read(4);
  ASSERT_TRUE(first);
  EXPECT_EQ(first->size(), 4u);
  EXPECT_TRUE(reader->wait(0ms));
  auto rest = reader->read();
  ASSERT_TRUE(rest);
  EXPECT_EQ(rest->size(), 6u);
  EXPECT_EQ(rest->back().seq, 10u);
}

TEST_F(OutputReaderTest, WaitTimesOutWithoutDataAndWakesWhenARecordIsAppended) {
  append(file_, record('O', "first"));
  auto reader = OutputReader::open(file_);
  ASSERT_TRUE(reader);
  ASSERT_TRUE(reader->read());
  const auto before = std::chrono::steady_clock::now();
  EXPECT_FALSE(reader->wait(100ms));
  EXPECT_GE(std::chrono::steady_clock::now() - before, 100ms);

  std::thread writer([&] {
    std::this_thread::sleep_for(50ms);
    append(file_, record('E', "second"));
  });
  const auto started = std::chrono::steady_clock::now();
  EXPECT_TRUE(reader->wait(5s));
  EXPECT_LT(std::chrono::steady_clock::now() - started, 2s);
  writer.join();
  auto lines = reader->read();
  ASSERT_TRUE(lines);
  EXPECT_THAT(texts(*lines), ElementsAre("second"));
}

}  // namespace
}  // namespace cnlab::agent

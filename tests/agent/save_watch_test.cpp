// When the agent takes a job's own save (CNLAB_CHECKPOINT_DIR after SIGUSR1) as done: real files
// in a temporary directory, the watch's clock given by the test.
#include "agent/save_watch.h"

#include <gtest/gtest.h>

#include <fstream>

namespace cnlab::agent {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using State = SaveWatch::State;

class SaveWatchTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/cnlab-save-watch-XXXXXX";
    dir_ = ::mkdtemp(name);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) {
    fs::create_directories((dir_ / name).parent_path());
    std::ofstream(dir_ / name, std::ios::trunc) << text;
  }

  fs::path dir_;
  const SaveWatch::Clock::time_point t0_ = SaveWatch::Clock::now();
};

TEST_F(SaveWatchTest, ASaveIsDoneWhenTheDirectoryHasChangedAndThenStayedQuiet) {
  write("old/state.json", "{\"epoch\": 1}");
  SaveWatch watch(dir_, 30s, 1s, t0_);
  EXPECT_EQ(watch.poll(t0_ + 5s), State::kWaiting) << "nothing changed yet: the job has not saved";
  write("old/state.json", "{\"epoch\": 12}");
  EXPECT_EQ(watch.poll(t0_ + 6s), State::kWaiting) << "just written: it may write more";
  write("weights.bin", "more");
  EXPECT_EQ(watch.poll(t0_ + 6500ms), State::kWaiting);
  EXPECT_EQ(watch.poll(t0_ + 7s), State::kWaiting) << "quiet for only 500 ms";
  EXPECT_EQ(watch.poll(t0_ + 7600ms), State::kSaved);
}

TEST_F(SaveWatchTest, AJobThatChangesNothingWithinTheGraceSavedNothing) {
  write("state.json", "{\"epoch\": 1}");
  SaveWatch watch(dir_, 3s, 1s, t0_);
  EXPECT_EQ(watch.poll(t0_ + 2900ms), State::kWaiting);
  EXPECT_EQ(watch.poll(t0_ + 3s), State::kNothingSaved);
}

TEST_F(SaveWatchTest, AJobStillWritingWhenTheGraceEndsHasWhatItWroteTaken) {
  SaveWatch watch(dir_, 3s, 1s, t0_);
  for (int i = 0; i < 6; ++i) {
    write("part-" + std::to_string(i), "x");
    EXPECT_EQ(watch.poll(t0_ + std::chrono::milliseconds(500 * i)), State::kWaiting) << i;
  }
  write("part-6", "x");
  EXPECT_EQ(watch.poll(t0_ + 3s), State::kSaved);
}

TEST_F(SaveWatchTest, AFileRemovedOrADirectoryThatAppearsLaterCountsAsAChange) {
  write("a", "1");
  SaveWatch gone(dir_, 30s, 1s, t0_);
  fs::remove(dir_ / "a");
  EXPECT_EQ(gone.poll(t0_ + 1s), State::kWaiting);
  EXPECT_EQ(gone.poll(t0_ + 2s), State::kSaved);

  SaveWatch later(dir_ / "not-yet", 30s, 1s, t0_);
  EXPECT_EQ(later.poll(t0_ + 1s), State::kWaiting);
  write("not-yet/state.json", "{}");
  EXPECT_EQ(later.poll(t0_ + 2s), State::kWaiting);
  EXPECT_EQ(later.poll(t0_ + 3s), State::kSaved);
}

}  // namespace
}  // namespace cnlab::agent

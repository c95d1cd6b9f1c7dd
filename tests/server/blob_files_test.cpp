// Storing a file that is already on the server's disk (a spooled upload) without copying it:
// adopt_blob takes only files of the store's incoming directory, hashes what is there, and leaves
// nothing behind whether it stores the file or refuses it.
#include "server/blob_files.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <stdlib.h>

#include <filesystem>
#include <fstream>

namespace cnlab::server {
namespace {

namespace fs = std::filesystem;
using ::testing::HasSubstr;

class AdoptBlobTest : public ::testing::Test {
 protected:
  void SetUp() override {
    char name[] = "/tmp/cnlab-blob-XXXXXX";
    root_ = ::mkdtemp(name);
    auto incoming = blob_incoming_dir(root_.string());
    ASSERT_TRUE(incoming) << incoming.error().to_string();
    incoming_ = *incoming;
  }
  void TearDown() override { fs::remove_all(root_); }

  std::string spooled(const std::string& name, const std::string& content) {
    const fs::path path = fs::path(incoming_) / name;
    std::ofstream(path, std::ios::binary) << content;
    return path.string();
  }
  static std::string read(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  }

  fs::path root_;
  std::string incoming_;
};

TEST_F(AdoptBlobTest, ASpooledFileIsStoredUnderItsNameWithItsHash) {
  EXPECT_EQ(fs::status(incoming_).permissions() & fs::perms::all, fs::perms::owner_all);
  auto stored = adopt_blob(root_.string(), "abc", spooled(".request-1", "checkpoint bytes"));
  ASSERT_TRUE(stored) << stored.error().to_string();
  EXPECT_EQ(stored->sha256, sha256_hex_of("checkpoint bytes"));
  EXPECT_EQ(stored->size_bytes, 16);
  EXPECT_EQ(read(root_ / "abc"), "checkpoint bytes");
  EXPECT_TRUE(fs::is_empty(incoming_));
  auto path = blob_file(root_.string(), "abc");
  ASSERT_TRUE(path) << path.error().to_string();
  EXPECT_EQ(fs::path(*path), root_ / "abc");
}

TEST_F(AdoptBlobTest, AHashKnownFromTheUploadIsTakenWithoutReadingTheFileAgain) {
  // The hash given is what the HTTP layer computed while writing; adopt_blob passes it to accept.
  const std::string given(64, 'c');
  std::string seen;
  auto stored = adopt_blob(root_.string(), "abc", spooled(".request-4", "bytes"),
                           [&](const BlobInfo& info) {
                             seen = info.sha256;
                             return Status::ok();
                           },
                           given);
  ASSERT_TRUE(stored) << stored.error().to_string();
  EXPECT_EQ(seen, given);
  auto not_a_hash = adopt_blob(root_.string(), "def", spooled(".request-5", "bytes"), {}, "not-a-hash");
  ASSERT_TRUE(not_a_hash);
  EXPECT_EQ(not_a_hash->sha256, sha256_hex_of("bytes")) << "anything but a hash is ignored: the file is read";
}

TEST_F(AdoptBlobTest, ARefusedFileIsRemovedAndNothingIsStored) {
  auto refused = adopt_blob(root_.string(), "abc", spooled(".request-2", "wrong bytes"),
                            [](const BlobInfo&) { return Error::invalid_argument("digest", "x", "does not match"); });
  ASSERT_FALSE(refused);
  EXPECT_EQ(refused.error().field, "digest");
  EXPECT_FALSE(fs::exists(root_ / "abc"));
  EXPECT_TRUE(fs::is_empty(incoming_));
}

TEST_F(AdoptBlobTest, OnlyFilesOfTheIncomingDirectoryAreTaken) {
  const fs::path outside = root_.parent_path() / (root_.filename().string() + "-secret");
  std::ofstream(outside) << "not the server's to store";
  for (const std::string& hostile : {outside.string(), incoming_ + "/../" + outside.filename().string(),
                                     incoming_ + "/..", (root_ / "abc").string()}) {
    auto refused = adopt_blob(root_.string(), "abc", hostile);
    ASSERT_FALSE(refused) << hostile;
    EXPECT_EQ(refused.error().code, ErrorCode::kInvalidArgument) << hostile;
    EXPECT_EQ(refused.error().field, "incoming_file");
  }
  EXPECT_TRUE(fs::exists(outside));
  EXPECT_FALSE(fs::exists(root_ / "abc"));
  fs::remove(outside);
  auto missing = adopt_blob(root_.string(), "abc", incoming_ + "/.request-gone");
  ASSERT_FALSE(missing);
  EXPECT_EQ(missing.error().code, ErrorCode::kNotFound);
  auto stored_name = adopt_blob(root_.string(), ".hidden", spooled(".request-3", "x"));
  ASSERT_FALSE(stored_name);
  EXPECT_THAT(stored_name.error().message, HasSubstr("stored file"));
}

TEST_F(AdoptBlobTest, WhatACrashLeftOnItsWayInIsClearedAndStoredFilesStay) {
  ASSERT_TRUE(write_blob(root_.string(), "kept", "stored"));
  spooled(".request-7", "half an upload");
  spooled("a1b2c3", "a temporary file");
  ASSERT_TRUE(clear_blob_incoming(root_.string()));
  EXPECT_TRUE(fs::is_empty(incoming_));
  EXPECT_EQ(read(root_ / "kept"), "stored");
  EXPECT_TRUE(clear_blob_incoming((root_ / "nothing-here").string())) << "no directory is no error";
}

TEST_F(AdoptBlobTest, AStoredFileThatIsALinkIsNotServed) {
  fs::create_symlink("/etc/passwd", root_ / "abc");
  EXPECT_EQ(blob_file(root_.string(), "abc").error().code, ErrorCode::kNotFound);
}

}  // namespace
}  // namespace cnlab::server

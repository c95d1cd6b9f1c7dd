// Which of a job's mounts a CRIU dump takes as external, and the list kept beside the images.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "agent/runtime/criu.h"

namespace cnlab::agent::criu {
namespace {

using ::testing::ElementsAre;
using ::testing::HasSubstr;
using ::testing::IsEmpty;

// A job's mount namespace on the H200 machine (its lines as /proc/PID/mountinfo gave them there,
// the driver's squashfs among them), and two more that CRIU cannot dump.
constexpr const char* kMountinfo =
    "23 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "24 23 0:21 / /proc rw,nosuid,nodev,noexec,relatime - proc proc rw\n"
    "25 23 0:5 / /dev rw,nosuid shared:2 - devtmpfs devtmpfs rw,size=65536k\n"
    "26 25 0:22 / /dev/pts rw,nosuid,noexec - devpts devpts rw,gid=5,mode=620\n"
    "27 23 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec - cgroup2 cgroup2 rw\n"
    "28 23 0:24 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw\n"
    "29 27 254:16 / /usr/local/nvidia ro,nosuid,nodev,relatime - squashfs /dev/vdb ro,errors=continue\n"
    "30 23 0:45 / /data\\040sets rw - ramfs ramfs rw\n"
    "31 23 0:46 / /mnt/scratch rw shared:9 master:3 - xfs /dev/vdc rw\n"
    "32 23 0:46 / /mnt/scratch rw - xfs /dev/vdc rw\n";

TEST(ExternalMounts, MountsOfFilesystemsCriuDoesNotDumpAreExternalAndTheRootNever) {
  EXPECT_THAT(external_mounts(kMountinfo), ElementsAre("/usr/local/nvidia", "/data sets", "/mnt/scratch"));
}

TEST(ExternalMounts, ANamespaceOfVirtualFilesystemsHasNone) {
  EXPECT_THAT(external_mounts("23 1 254:0 / / rw - ext4 /dev/vda rw\n24 23 0:21 / /proc rw - proc proc rw\n"), IsEmpty());
  EXPECT_THAT(external_mounts(""), IsEmpty());
  EXPECT_THAT(external_mounts("not a mountinfo line\n"), IsEmpty());
}

TEST(ExternalMounts, TheListBesideTheImagesRoundTrips) {
  const std::vector<std::string> mounts = {"/usr/local/nvidia", "/data sets"};
  auto decoded = decode_mounts(encode_mounts(mounts));
  ASSERT_TRUE(decoded) << decoded.error().to_string();
  EXPECT_EQ(*decoded, mounts);
}

TEST(ExternalMounts, AListNamingARelativePathOrDotDotIsRefused) {
  for (const char* bad : {R"({"external_mounts":["usr/local"]})", R"({"external_mounts":["/a/../etc"]})",
                          R"({"external_mounts":["/a/.."]})", R"({"external_mounts":[""]})",
                          R"({"external_mounts":[7]})"}) {
    auto decoded = decode_mounts(bad);
    ASSERT_FALSE(decoded) << bad;
    EXPECT_THAT(decoded.error().to_string(), HasSubstr("external_mounts")) << bad;
  }
  EXPECT_FALSE(decode_mounts("[]"));
  EXPECT_FALSE(decode_mounts("{"));
}

TEST(ExternalMounts, DumpAndRestoreNameEachMountAlike) {
  const std::vector<std::string> mounts = {"/usr/local/nvidia"};
  auto dump = dump_args("/usr/local/sbin/criu", 42, "/i", "/i/dump.log", Leave::kNothing, mounts);
  auto restore = restore_args("/usr/local/sbin/criu", "/i", "/i/restore.log", "/i/pid", Pipes{}, 3, 4, 5, mounts);
  auto after = [](const std::vector<std::string>& args, const std::string& flag) {
    for (size_t i = 0; i + 1 < args.size(); ++i) {
      if (args[i] == flag) return args[i + 1];
    }
    return std::string();
  };
  EXPECT_EQ(after(dump, "--external"), "mnt[/usr/local/nvidia]:cnlab-mount-0");
  EXPECT_EQ(after(restore, "--external"), "mnt[cnlab-mount-0]:/usr/local/nvidia");
}

}  // namespace
}  // namespace cnlab::agent::criu

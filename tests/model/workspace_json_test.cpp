// Workspaces: content-addressed, named by their digest; bad input names its JSON path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

const std::string kHex = "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08";

Workspace uploaded() {
  Workspace w;
  w.meta = {kHex, "uid-w", {}, 5};
  w.digest = "sha256:" + kHex;
  w.size_bytes = 52'428'800;
  w.project = "vision";
  w.uploaded_by = "alice";
  w.uploaded_at = *parse_rfc3339("2026-11-30T10:00:00Z", "t");
  return w;
}

TEST(WorkspaceJson, RoundTripsEveryField) {
  Workspace w = uploaded();
  Json j = to_json(w);
  EXPECT_EQ(j["kind"], "Workspace");
  EXPECT_EQ(j["spec"], Json({{"digest", "sha256:" + kHex},
                             {"size_bytes", 52'428'800},
                             {"project", "vision"},
                             {"uploaded_by", "alice"},
                             {"uploaded_at", "2026-11-30T10:00:00Z"}}));
  auto back = workspace_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, w);
}

TEST(WorkspaceJson, IsNamedByItsDigestsHexPart) {
  EXPECT_EQ(workspace_name("sha256:" + kHex), kHex);
  Json j = to_json(uploaded());
  j["metadata"]["name"] = std::string(64, 'b');
  auto bad = workspace_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "metadata.name");
  EXPECT_THAT(bad.error().message, HasSubstr(kHex));
}

TEST(WorkspaceJson, BadFieldsNameTheirPath) {
  for (std::string digest :
       {kHex, "sha256:" + kHex.substr(1), "sha256:" + kHex + "0", "SHA256:" + kHex, "sha256:9F86" + kHex.substr(4)}) {
    Json j = to_json(uploaded());
    j["spec"]["digest"] = digest;
    auto bad = workspace_from_json(j);
    ASSERT_FALSE(bad) << digest;
    EXPECT_EQ(bad.error().field, "spec.digest") << digest;
    EXPECT_THAT(bad.error().message, HasSubstr("64 lowercase hex digits"));
  }
  const std::pair<const char*, Json> bad_values[] = {
      {"size_bytes", -1},       {"size_bytes", "50M"},  {"project", ""},
      {"uploaded_by", "Alice"}, {"uploaded_at", "now"}, {"path", "/tmp/x"},
  };
  for (const auto& [field, value] : bad_values) {
    Json j = to_json(uploaded());
    j["spec"][field] = value;
    auto bad = workspace_from_json(j);
    ASSERT_FALSE(bad) << field << "=" << value.dump();
    EXPECT_EQ(bad.error().field, std::string("spec.") + field);
  }
  Json j = to_json(uploaded());
  j["spec"].erase("uploaded_at");
  EXPECT_EQ(workspace_from_json(j).error().field, "spec.uploaded_at");
  j = to_json(uploaded());
  j["status"] = {{"files", 3}};
  EXPECT_EQ(workspace_from_json(j).error().field, "status");
}

TEST(WorkspaceJson, UploaderMayBeEmpty) {
  Workspace w = uploaded();
  w.uploaded_by = "";
  auto back = workspace_from_json(to_json(w));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, w);
}

}  // namespace
}  // namespace cnlab::model

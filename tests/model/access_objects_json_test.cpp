// Users, role bindings and tokens: their JSON form round-trips and bad input names its JSON path.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/model.h"

namespace cnlab::model {
namespace {

using ::testing::HasSubstr;

Time at(std::string_view text) { return *parse_rfc3339(text, "t"); }

// ---- User -----------------------------------------------------------------------------------

User alice() { return {{"alice", "uid-a", {{"team", "vision"}}, 3}, "Alice Liddell", "alice@example.com", true}; }

TEST(UserJson, RoundTripsEveryField) {
  User user = alice();
  Json j = to_json(user);
  EXPECT_EQ(j["kind"], "User");
  EXPECT_EQ(j["spec"], Json({{"display_name", "Alice Liddell"}, {"email", "alice@example.com"}, {"disabled", true}}));
  auto back = user_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, user);
}

TEST(UserJson, OnlyANameIsRequired) {
  auto user = user_from_json(Json::parse(R"({"metadata": {"name": "bob"}})"));
  ASSERT_TRUE(user) << user.error().to_string();
  EXPECT_EQ(*user, (User{{"bob", "", {}, 0}, "", "", false}));
}

TEST(UserJson, BadFieldsNameTheirPath) {
  for (std::string email : {"alice", "@example.com", "alice@", "a b@example.com", "a@b@c"}) {
    Json j = to_json(alice());
    j["spec"]["email"] = email;
    auto bad = user_from_json(j);
    ASSERT_FALSE(bad) << email;
    EXPECT_EQ(bad.error().field, "spec.email") << email;
  }
  Json j = to_json(alice());
  j["spec"]["display_name"] = std::string(257, 'x');
  EXPECT_EQ(user_from_json(j).error().field, "spec.display_name");
  j = to_json(alice());
  j["spec"]["disabled"] = "no";
  EXPECT_EQ(user_from_json(j).error().field, "spec.disabled");
  j = to_json(alice());
  j["metadata"]["name"] = "Alice";
  EXPECT_EQ(user_from_json(j).error().field, "metadata.name");
  j = to_json(alice());
  j["spec"]["password"] = "hunter2";
  auto unknown = user_from_json(j);
  ASSERT_FALSE(unknown);
  EXPECT_EQ(unknown.error().field, "spec.password");
  EXPECT_THAT(unknown.error().message, HasSubstr("unknown field"));
  j = to_json(alice());
  j["status"] = {{"last_login", "2026-11-30T10:00:00Z"}};
  EXPECT_EQ(user_from_json(j).error().field, "status");
  j = to_json(alice());
  j["kind"] = "Users";
  EXPECT_EQ(user_from_json(j).error().field, "kind");
}

// ---- RoleBinding ----------------------------------------------------------------------------

RoleBinding vision_member() { return {{"alice-vision", "uid-rb", {}, 9}, "alice", "vision", "member"}; }

TEST(RoleBindingJson, RoundTripsProjectAndClusterWideBindings) {
  RoleBinding binding = vision_member();
  Json j = to_json(binding);
  EXPECT_EQ(j["spec"], Json({{"user", "alice"}, {"project", "vision"}, {"role", "member"}}));
  auto back = role_binding_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, binding);

  for (std::string_view role : kRoleNames) {
    RoleBinding admin{{"root-admin", "", {}, 0}, "root", std::string(kAllProjects), std::string(role)};
    auto back_admin = role_binding_from_json(to_json(admin));
    ASSERT_TRUE(back_admin) << back_admin.error().to_string();
    EXPECT_EQ(*back_admin, admin);
  }
}

TEST(RoleBindingJson, UnknownRoleIsRefusedListingTheFour) {
  Json j = to_json(vision_member());
  j["spec"]["role"] = "owner";
  auto bad = role_binding_from_json(j);
  ASSERT_FALSE(bad);
  EXPECT_EQ(bad.error().field, "spec.role");
  EXPECT_EQ(bad.error().value, "owner");
  EXPECT_THAT(bad.error().message, HasSubstr("admin, project-admin, member, viewer"));
  j["spec"]["role"] = "Admin";
  EXPECT_EQ(role_binding_from_json(j).error().field, "spec.role");
}

TEST(RoleBindingJson, ProjectIsANameOrStarAndEveryFieldIsRequired) {
  for (std::string project : {"**", "../vision", "", "Vision"}) {
    Json j = to_json(vision_member());
    j["spec"]["project"] = project;
    auto bad = role_binding_from_json(j);
    ASSERT_FALSE(bad) << project;
    EXPECT_EQ(bad.error().field, "spec.project") << project;
  }
  Json j = to_json(vision_member());
  j["spec"]["project"] = "x/y";
  EXPECT_THAT(role_binding_from_json(j).error().message, HasSubstr("\"*\""));
  for (std::string field : {"user", "project", "role"}) {
    Json missing = to_json(vision_member());
    missing["spec"].erase(field);
    auto bad = role_binding_from_json(missing);
    ASSERT_FALSE(bad) << field;
    EXPECT_EQ(bad.error().field, "spec." + field);
  }
  j = to_json(vision_member());
  j["spec"]["user"] = "bob smith";
  EXPECT_EQ(role_binding_from_json(j).error().field, "spec.user");
  j = to_json(vision_member());
  j["spec"]["expires"] = "never";
  EXPECT_EQ(role_binding_from_json(j).error().field, "spec.expires");
}

// ---- JoinToken ------------------------------------------------------------------------------

JoinToken join_token() {
  JoinToken token;
  token.meta = {"k3x9q2", "uid-jt", {}, 4};
  token.secret_sha256 = std::string(60, 'a') + "0f19";
  token.expires_at = at("2026-12-01T00:00:00Z");
  token.revoked = false;
  token.uses = 2;
  token.max_uses = 5;
  token.created_by = "root";
  return token;
}

TEST(JoinTokenJson, RoundTripsEveryField) {
  JoinToken token = join_token();
  Json j = to_json(token);
  EXPECT_EQ(j["spec"]["max_uses"], 5);
  EXPECT_EQ(j["status"]["uses"], 2);
  EXPECT_EQ(j["spec"]["expires_at"], "2026-12-01T00:00:00Z");
  auto back = join_token_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, token);

  token.max_uses.reset();
  token.revoked = true;
  token.created_by = "";
  EXPECT_FALSE(to_json(token)["spec"].contains("max_uses"));
  back = join_token_from_json(to_json(token));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, token);
}

TEST(JoinTokenJson, IsUsableUntilRevokedExpiredOrUsedUp) {
  JoinToken token = join_token();
  EXPECT_TRUE(token.usable(at("2026-11-30T00:00:00Z")));
  EXPECT_FALSE(token.usable(at("2026-12-01T00:00:00Z")));
  token.uses = 5;
  EXPECT_FALSE(token.usable(at("2026-11-30T00:00:00Z")));
  token.max_uses.reset();
  EXPECT_TRUE(token.usable(at("2026-11-30T00:00:00Z")));
  token.revoked = true;
  EXPECT_FALSE(token.usable(at("2026-11-30T00:00:00Z")));
}

TEST(JoinTokenJson, BadFieldsNameTheirPath) {
  for (std::string secret : {std::string(63, 'a'), std::string(64, 'A'), std::string(64, 'z'), std::string()}) {
    Json j = to_json(join_token());
    j["spec"]["secret_sha256"] = secret;
    auto bad = join_token_from_json(j);
    ASSERT_FALSE(bad) << secret;
    EXPECT_EQ(bad.error().field, "spec.secret_sha256");
  }
  Json j = to_json(join_token());
  j["spec"]["max_uses"] = 0;
  EXPECT_EQ(join_token_from_json(j).error().field, "spec.max_uses");
  j = to_json(join_token());
  j["status"]["uses"] = -1;
  EXPECT_EQ(join_token_from_json(j).error().field, "status.uses");
  j = to_json(join_token());
  j["spec"].erase("expires_at");
  EXPECT_EQ(join_token_from_json(j).error().field, "spec.expires_at");
  j = to_json(join_token());
  j["spec"]["expires_at"] = "never";
  EXPECT_EQ(join_token_from_json(j).error().field, "spec.expires_at");
  j = to_json(join_token());
  j["spec"]["created_by"] = std::string("a\0b", 3);
  EXPECT_EQ(join_token_from_json(j).error().field, "spec.created_by");
  j = to_json(join_token());
  j["spec"]["secret"] = "plaintext";
  EXPECT_EQ(join_token_from_json(j).error().field, "spec.secret");
  j = to_json(join_token());
  j["status"]["last_used"] = "2026-11-30T00:00:00Z";
  EXPECT_EQ(join_token_from_json(j).error().field, "status.last_used");
}

// ---- ApiToken -------------------------------------------------------------------------------

ApiToken api_token() {
  return {{"0123456789abcdef0123456789abcdef", "uid-at", {}, 11},
          "alice",
          "vision",
          at("2026-12-30T00:00:00Z"),
          true,
          "root"};
}

TEST(ApiTokenJson, RoundTripsEveryField) {
  ApiToken token = api_token();
  Json j = to_json(token);
  EXPECT_EQ(j["spec"], Json({{"user", "alice"},
                             {"project", "vision"},
                             {"expires_at", "2026-12-30T00:00:00Z"},
                             {"revoked", true},
                             {"created_by", "root"}}));
  auto back = api_token_from_json(j);
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, token);
}

TEST(ApiTokenJson, ProjectAndCreatorMayBeEmptyAndNodeSubjectsAreAllowed) {
  ApiToken token = api_token();
  token.project = "";
  token.created_by = "";
  token.user = "node:gpu-12";
  token.revoked = false;
  auto back = api_token_from_json(to_json(token));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, token);
}

TEST(ApiTokenJson, CreatorMayBeASystemActorButIsBounded) {
  ApiToken token = api_token();
  token.created_by = "cnlab server init";
  auto back = api_token_from_json(to_json(token));
  ASSERT_TRUE(back) << back.error().to_string();
  EXPECT_EQ(*back, token);

  Json j = to_json(token);
  j["spec"]["created_by"] = std::string(kMaxCreatedByBytes + 1, 'x');
  EXPECT_EQ(api_token_from_json(j).error().field, "spec.created_by");
  token.created_by = std::string(kMaxCreatedByBytes + 1, 'x');
  EXPECT_EQ(validate(token).error().field, "spec.created_by");
}

TEST(ApiTokenJson, BadFieldsNameTheirPath) {
  for (std::string user : {"", "Alice", "node:", "node:GPU 12", "alice:x"}) {
    Json j = to_json(api_token());
    j["spec"]["user"] = user;
    auto bad = api_token_from_json(j);
    ASSERT_FALSE(bad) << user;
    EXPECT_EQ(bad.error().field, "spec.user") << user;
  }
  Json j = to_json(api_token());
  j["spec"]["project"] = "../x";
  EXPECT_EQ(api_token_from_json(j).error().field, "spec.project");
  j = to_json(api_token());
  j["spec"].erase("expires_at");
  EXPECT_EQ(api_token_from_json(j).error().field, "spec.expires_at");
  j = to_json(api_token());
  j["spec"]["token"] = "eyJ...";
  EXPECT_EQ(api_token_from_json(j).error().field, "spec.token");
  j = to_json(api_token());
  j["metadata"]["name"] = "JTI_1";
  EXPECT_EQ(api_token_from_json(j).error().field, "metadata.name");
  j = to_json(api_token());
  j["status"] = {{"last_used", "x"}};
  EXPECT_EQ(api_token_from_json(j).error().field, "status");
}

}  // namespace
}  // namespace cnlab::model

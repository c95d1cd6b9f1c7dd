#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "auth/auth.h"

namespace cnlab::auth {
namespace {

using ::testing::HasSubstr;

TEST(Rbac, TableGivesEachRoleExactlyItsActions) {
  struct Row {
    Role role;
    bool read, submit, cancel_own, cancel_any, manage_project, manage_cluster;
  };
  const Row table[] = {
      {Role::kViewer, true, false, false, false, false, false},
      {Role::kMember, true, true, true, false, false, false},
      {Role::kProjectAdmin, true, true, true, true, true, false},
      {Role::kAdmin, true, true, true, true, true, true},
  };
  for (const Row& r : table) {
    SCOPED_TRACE(std::string(to_string(r.role)));
    EXPECT_EQ(allows(r.role, Action::kRead), r.read);
    EXPECT_EQ(allows(r.role, Action::kSubmit), r.submit);
    EXPECT_EQ(allows(r.role, Action::kCancelOwn), r.cancel_own);
    EXPECT_EQ(allows(r.role, Action::kCancelAny), r.cancel_any);
    EXPECT_EQ(allows(r.role, Action::kManageProject), r.manage_project);
    EXPECT_EQ(allows(r.role, Action::kManageCluster), r.manage_cluster);
  }
}

TEST(Rbac, ParseRoleRoundTripsEveryRole) {
  for (Role role : {Role::kViewer, Role::kMember, Role::kProjectAdmin, Role::kAdmin}) {
    auto parsed = parse_role(to_string(role), "role");
    ASSERT_TRUE(parsed) << to_string(role);
    EXPECT_EQ(*parsed, role);
  }
  EXPECT_EQ(to_string(Role::kProjectAdmin), "project-admin");
}

TEST(Rbac, ParseRoleRefusesUnknownNamesAndListsTheKnownOnes) {
  for (std::string_view bad : {"owner", "Admin", "project_admin", "", "admin "}) {
    auto parsed = parse_role(bad, "bindings[0].role");
    ASSERT_FALSE(parsed) << bad;
    EXPECT_EQ(parsed.error().code, ErrorCode::kInvalidArgument);
    EXPECT_EQ(parsed.error().field, "bindings[0].role");
    EXPECT_EQ(parsed.error().value, bad);
    EXPECT_THAT(parsed.error().message, HasSubstr("admin, project-admin, member, viewer"));
  }
}

TEST(Rbac, StarAdminBindingAppliesToEveryProject) {
  Bindings bindings{{{"*", Role::kAdmin}, {"vision", Role::kViewer}}};
  EXPECT_EQ(bindings.role_in("vision"), Role::kAdmin);
  EXPECT_EQ(bindings.role_in("nlp"), Role::kAdmin);
  EXPECT_TRUE(bindings.is_admin());
}

TEST(Rbac, ProjectBindingStrongerThanStarBindingWins) {
  Bindings bindings{{{"*", Role::kViewer}, {"vision", Role::kProjectAdmin}}};
  EXPECT_EQ(bindings.role_in("vision"), Role::kProjectAdmin);
  EXPECT_EQ(bindings.role_in("nlp"), Role::kViewer);
  EXPECT_FALSE(bindings.is_admin());
}

TEST(Rbac, NoBindingMeansNoRole) {
  Bindings bindings{{{"vision", Role::kMember}}};
  EXPECT_EQ(bindings.role_in("vision"), Role::kMember);
  EXPECT_EQ(bindings.role_in("nlp"), std::nullopt);
  EXPECT_FALSE(bindings.is_admin());
  EXPECT_EQ(Bindings{}.role_in("vision"), std::nullopt);
}

TEST(Rbac, ProjectScopedAdminBindingDoesNotMakeAClusterAdmin) {
  Bindings bindings{{{"vision", Role::kAdmin}}};
  EXPECT_FALSE(bindings.is_admin());
}

}  // namespace
}  // namespace cnlab::auth

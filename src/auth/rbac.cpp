// Roles and what they allow. The whole policy is the table in allows().
#include <algorithm>

#include "auth/auth.h"

namespace cnlab::auth {

std::string_view to_string(Role role) {
  switch (role) {
    case Role::kViewer: return "viewer";
    case Role::kMember: return "member";
    case Role::kProjectAdmin: return "project-admin";
    case Role::kAdmin: return "admin";
  }
  return "unknown";
}

Result<Role> parse_role(std::string_view text, std::string_view field) {
  for (Role role : {Role::kAdmin, Role::kProjectAdmin, Role::kMember, Role::kViewer}) {
    if (text == to_string(role)) return role;
  }
  return Error::invalid_argument(std::string(field), std::string(text),
                                 "unknown role; known roles: admin, project-admin, member, viewer");
}

bool allows(Role role, Action action) {
  switch (action) {
    case Action::kRead: return true;  // every role reads
    case Action::kSubmit:
    case Action::kCancelOwn: return role >= Role::kMember;
    case Action::kCancelAny:
    case Action::kManageProject: return role >= Role::kProjectAdmin;
    case Action::kManageCluster: return role == Role::kAdmin;
  }
  return false;
}

std::optional<Role> Bindings::role_in(const std::string& project) const {
  std::optional<Role> role;
  for (const std::string& key : {project, std::string("*")}) {
    auto it = by_project.find(key);
    if (it != by_project.end()) role = role ? std::max(*role, it->second) : it->second;
  }
  return role;
}

bool Bindings::is_admin() const {
  auto it = by_project.find("*");
  return it != by_project.end() && it->second == Role::kAdmin;
}

}  // namespace cnlab::auth

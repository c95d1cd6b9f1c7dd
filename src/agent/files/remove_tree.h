// safe_remove_tree: removes a job's work directory, never anything a link inside it points to.
#pragma once

#include <string>

#include "common/result.h"

namespace cnlab::agent {

// Removes `dir` and everything in it. Symbolic links are removed, never followed (a job that
// planted `out -> /etc` loses the link, /etc is untouched): every directory is opened relative to
// its parent with O_NOFOLLOW and every entry removed with unlinkat. The walk holds one descriptor
// however deep the tree (it climbs back with "..", checked against the device and inode it came
// from), so a hostile depth cannot exhaust descriptors or the stack. Directories without write or
// search permission for the agent's user are made so first. It never crosses into another file
// system: a mount point below `dir` is an error (kFailedPrecondition naming it; unmount it first),
// as is an entry that stays after removal.
// Absent `dir`: success (removal is idempotent). `dir` itself a symbolic link: the link is removed.
Status safe_remove_tree(const std::string& dir);

}  // namespace cnlab::agent

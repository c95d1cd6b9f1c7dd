// Private to src/agent/files: descriptor-relative file system steps that never follow a symbolic
// link, shared by the walkers (pack, artifacts, remove) and the extractor.
#pragma once

#include <sys/stat.h>

#include <string>
#include <vector>

#include "agent/files/unique_fd.h"
#include "common/result.h"

namespace cnlab::agent::detail {

// Opens the directory `name` in `parent` (AT_FDCWD for a path), refusing a symbolic link (ELOOP)
// and anything not a directory (ENOTDIR). errno is set on failure.
UniqueFd open_directory_at(int parent, const char* name);

// The names in the directory `dir_fd` (except "." and ".."), in byte order. The descriptor's
// position is left at the end. errno is set and false returned on failure.
bool list_directory(int dir_fd, std::vector<std::string>* names);

// "a symbolic link", "a named pipe", "a socket", "a character device", ... for messages.
std::string kind_of(mode_t mode);

}  // namespace cnlab::agent::detail

namespace cnlab::agent::detail {

// Removes everything inside the directory `dir_fd` without following a symbolic link and without
// crossing into another file system (remove_tree.cpp). `shown_path` names it in errors.
Status remove_directory_contents(int dir_fd, const std::string& shown_path);

}  // namespace cnlab::agent::detail

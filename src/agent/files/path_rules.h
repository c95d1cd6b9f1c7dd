// Private to src/agent/files: the rules for paths that cross a trust boundary (archive entries, link
// targets, artifact paths the server will be asked to store), shared by packing, unpacking and
// artifact collection so that the three agree on what is inside a directory.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace cnlab::agent::detail {

// The server's limits on an artifact path (src/server/blob_files.h keeps the same numbers).
inline constexpr size_t kMaxUploadPathBytes = 4096;
inline constexpr size_t kMaxUploadPathSegments = 32;

// Why the server would refuse `path` as an artifact path (1..4096 bytes, at most 32 segments,
// relative, no empty, "." or ".." segment, no NUL, no backslash), or nullopt when it would take it.
// The reason reads after "its path ": "contains a backslash", "has more than 32 segments (40)".
std::optional<std::string> upload_path_problem(std::string_view path);

// An archive entry's name made canonical: leading "./" and a trailing '/' dropped ("./src/" ->
// "src"). Empty for the archive's root ("." or "./"). nullopt with `problem` set when the name is
// absolute or has an empty, "." or ".." segment after that.
std::optional<std::string> clean_entry_path(std::string_view raw, std::string* problem);

// Why a symbolic link at `link_path` (relative to the root, '/'-separated, already clean) with
// `target` could resolve outside the root, or nullopt when it cannot. The rule is stricter than a
// lexical normalisation: ".." may only lead the target ("../../lib/x"), never follow a name
// ("a/../x"), because a name can itself be a link (`s -> .` makes "s/../x" climb out while its
// lexical form "x" stays in). Leading ".." climb real directories (links are never written through),
// so counting them against the link's depth is exact.
std::optional<std::string> symlink_target_problem(std::string_view link_path, std::string_view target);

// '/'-separated segments of a clean relative path.
std::vector<std::string_view> path_segments(std::string_view path);

// A path or name as shown in a message: at most 256 bytes, control characters as \xNN.
std::string shown(std::string_view text);

// "1.5 GiB (1610612736 bytes)"-style sizes for messages; exact bytes always follow.
std::string human_bytes(int64_t bytes);

}  // namespace cnlab::agent::detail

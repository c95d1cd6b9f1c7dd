// The face of src/agent/files: workspace archives (packed by the CLI, unpacked and cached by the
// agent), artifact collection and the safe removal of a job's directory.
#pragma once

#include "agent/files/artifacts.h"
#include "agent/files/digest.h"
#include "agent/files/disk_space.h"
#include "agent/files/ignore_rules.h"
#include "agent/files/place_file.h"
#include "agent/files/remove_tree.h"
#include "agent/files/unique_fd.h"
#include "agent/files/workspace_cache.h"
#include "agent/files/workspace_format.h"
#include "agent/files/workspace_pack.h"
#include "agent/files/workspace_unpack.h"

// The face of src/model: the GPU catalog and MIG geometry, slice requests, and the API objects.
#pragma once

#include "model/api_token.h"
#include "model/gpu_catalog.h"
#include "model/job.h"
#include "model/join_token.h"
#include "model/mig_layout.h"
#include "model/node.h"
#include "model/object_meta.h"
#include "model/project.h"
#include "model/quantity.h"
#include "model/quota.h"
#include "model/role_binding.h"
#include "model/slice_request.h"
#include "model/user.h"
#include "model/workspace.h"

// The face of src/model: the GPU catalog and MIG geometry, slice requests, and the API objects.
#pragma once

#include "model/gpu_catalog.h"
#include "model/job.h"
#include "model/mig_layout.h"
#include "model/node.h"
#include "model/object_meta.h"
#include "model/project.h"
#include "model/quantity.h"
#include "model/slice_request.h"

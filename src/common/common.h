// The face of src/common: what every other module may use.
#pragma once

#include "common/check.h"
#include "common/error.h"
#include "common/json_reader.h"
#include "common/result.h"
#include "common/strings.h"
#include "common/time.h"

// Memory quantities as people write them: "30Gi", "512Mi", "1Ti", "80G" (decimal), counted in MiB.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab::model {

// Binary (Mi, Gi, Ti, optionally with B) and decimal (M, G, T, optionally with B) units, any case.
// Decimal amounts are rounded up to whole MiB. Zero and negative amounts are refused.
Result<int64_t> parse_memory_mib(std::string_view text, std::string_view field);
// The largest binary unit that divides the amount exactly: 30720 -> "30Gi", 1500 -> "1500Mi".
std::string format_memory_mib(int64_t mib);

}  // namespace cnlab::model

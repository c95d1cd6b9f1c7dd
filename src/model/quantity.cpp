#include "model/quantity.h"

#include <cctype>

#include "common/strings.h"

namespace cnlab::model {

Result<int64_t> parse_memory_mib(std::string_view text, std::string_view field) {
  auto bad = [&](std::string why) {
    return Error::invalid_argument(std::string(field), std::string(text),
                                   why + "; expected an amount with a unit such as 512Mi, 30Gi, 1Ti or 80G");
  };
  size_t digits = 0;
  while (digits < text.size() && std::isdigit(static_cast<unsigned char>(text[digits]))) ++digits;
  if (digits == 0) return bad("no amount");
  if (digits > 12) return bad("amount too large");
  int64_t amount = *parse_int(text.substr(0, digits), field);
  if (amount <= 0) return bad("must be more than 0");
  std::string unit = to_lower(text.substr(digits));
  if (unit.size() == 3 && unit[2] == 'b') unit.pop_back();                      // GiB -> gi
  if (unit.size() == 2 && unit[1] == 'b' && unit[0] != 'i') unit.pop_back();  // GB -> g
  constexpr int64_t kMb = 1000 * 1000, kMib = 1024 * 1024;
  int64_t bytes_per_unit = 0;
  if (unit == "mi") return amount;
  if (unit == "gi") return amount * 1024;
  if (unit == "ti") return amount * 1024 * 1024;
  if (unit == "m") bytes_per_unit = kMb;
  else if (unit == "g") bytes_per_unit = kMb * 1000;
  else if (unit == "t") bytes_per_unit = kMb * 1000 * 1000;
  else return bad(unit.empty() ? "missing unit" : "unknown unit \"" + std::string(text.substr(digits)) + "\"");
  // Round up: a quota must never be smaller than what was asked.
  __int128 total = static_cast<__int128>(amount) * bytes_per_unit;
  return static_cast<int64_t>((total + kMib - 1) / kMib);
}

std::string format_memory_mib(int64_t mib) {
  if (mib > 0 && mib % (1024 * 1024) == 0) return std::to_string(mib / (1024 * 1024)) + "Ti";
  if (mib > 0 && mib % 1024 == 0) return std::to_string(mib / 1024) + "Gi";
  return std::to_string(mib) + "Mi";
}

}  // namespace cnlab::model

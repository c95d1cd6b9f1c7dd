#include "cli/arguments.h"

#include <cstdint>

#include "model/object_meta.h"

namespace cnlab::cli {

CLI::Validator object_name(const std::string& what, const std::string& hint) {
  return CLI::Validator(
      [what, hint](std::string& value) -> std::string {
        if (model::validate_name(value, what)) return "";
        return "\"" + value + "\" is not a " + what + ": expected 1..63 characters of a-z, 0-9, '-' and '.', " +
               "starting and ending with a letter or digit; " + hint;
      },
      "");
}

CLI::Validator job_id() { return object_name("job id", "such as train-6f3ae726 (cnlab ps lists them)"); }

CLI::Validator node_name() { return object_name("node name", "such as gpu-7 (cnlab nodes lists them)"); }

CLI::Validator positive_seconds() {
  return CLI::Validator(
      [](std::string& value) -> std::string {
        int64_t seconds = 0;
        if (CLI::detail::lexical_cast(value, seconds) && seconds > 0) return "";
        return "\"" + value + "\": expected a whole number of seconds above 0, such as 60";
      },
      "POSITIVE");
}

}  // namespace cnlab::cli

// Errors as values: what went wrong, where, with which value, and what would be right.
#pragma once

#include <string>
#include <string_view>

namespace cnlab {

enum class ErrorCode {
  kInvalidArgument,  // bad input from a caller: a request, a file, a flag
  kNotFound,
  kAlreadyExists,
  kFailedPrecondition,  // the request is well-formed but the world does not allow it now
  kUnavailable,
  kInternal,
};

std::string_view to_string(ErrorCode code);

// An error a human can act on. `field` names the input that was wrong (a flag, a JSON path, a
// file:line:column), `value` is the offending value as given, and `message` says what is allowed.
struct Error {
  ErrorCode code = ErrorCode::kInternal;
  std::string field;
  std::string value;
  std::string message;

  static Error invalid_argument(std::string field, std::string value, std::string message);
  static Error not_found(std::string field, std::string value, std::string message);
  static Error failed_precondition(std::string message);
  static Error internal(std::string message);

  // `field "value": message`, or just the message when there is no field.
  std::string to_string() const;
};

}  // namespace cnlab

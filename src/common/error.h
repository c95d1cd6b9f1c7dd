// Errors as values: what went wrong, where, with which value, and what would be right.
#pragma once

#include <string>
#include <string_view>

namespace cnlab {

// Each code has one HTTP status in the API (src/server): the comment gives it.
enum class ErrorCode {
  kInvalidArgument,     // 400 bad input from a caller: a request, a file, a flag
  kUnauthenticated,     // 401 no credential, or one that is forged, expired or revoked
  kPermissionDenied,    // 403 authenticated, but the role does not allow it
  kNotFound,            // 404 (also what a caller gets for another project's object)
  kAlreadyExists,       // 409
  kConflict,            // 409 a compare-and-swap lost: someone else changed the object first
  kGone,                // 410 a watch or list from a revision older than what is kept
  kTooLarge,            // 413 a body, header or upload over its limit
  kFailedPrecondition,  // 422 well-formed, but the world does not allow it (quota, can never fit)
  kResourceExhausted,   // 429 too many requests or streams
  kUnavailable,         // 503
  kInternal,            // 500
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
  static Error of(ErrorCode code, std::string field, std::string value, std::string message);
  static Error internal(std::string message);

  // `field "value": message`, or just the message when there is no field.
  std::string to_string() const;
};

}  // namespace cnlab

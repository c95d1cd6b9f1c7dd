#include "common/error.h"

#include <fmt/format.h>

namespace cnlab {

std::string_view to_string(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid argument";
    case ErrorCode::kUnauthenticated: return "unauthenticated";
    case ErrorCode::kPermissionDenied: return "permission denied";
    case ErrorCode::kNotFound: return "not found";
    case ErrorCode::kAlreadyExists: return "already exists";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kGone: return "gone";
    case ErrorCode::kTooLarge: return "too large";
    case ErrorCode::kResourceExhausted: return "resource exhausted";
    case ErrorCode::kFailedPrecondition: return "failed precondition";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Error Error::invalid_argument(std::string field, std::string value, std::string message) {
  return {ErrorCode::kInvalidArgument, std::move(field), std::move(value), std::move(message)};
}

Error Error::not_found(std::string field, std::string value, std::string message) {
  return {ErrorCode::kNotFound, std::move(field), std::move(value), std::move(message)};
}

Error Error::failed_precondition(std::string message) {
  return {ErrorCode::kFailedPrecondition, "", "", std::move(message)};
}

Error Error::of(ErrorCode code, std::string field, std::string value, std::string message) {
  return {code, std::move(field), std::move(value), std::move(message)};
}

Error Error::internal(std::string message) { return {ErrorCode::kInternal, "", "", std::move(message)}; }

std::string Error::to_string() const {
  if (field.empty()) return message;
  return fmt::format("{} \"{}\": {}", field, value, message);
}

}  // namespace cnlab

#include "server/api_error.h"

namespace cnlab::server {

int http_status(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return 400;
    case ErrorCode::kUnauthenticated: return 401;
    case ErrorCode::kPermissionDenied: return 403;
    case ErrorCode::kNotFound: return 404;
    case ErrorCode::kAlreadyExists: return 409;
    case ErrorCode::kConflict: return 409;
    case ErrorCode::kGone: return 410;
    case ErrorCode::kTooLarge: return 413;
    case ErrorCode::kFailedPrecondition: return 422;
    case ErrorCode::kResourceExhausted: return 429;
    case ErrorCode::kUnavailable: return 503;
    case ErrorCode::kInternal: return 500;
  }
  return 500;
}

std::string_view api_code(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument: return "invalid_argument";
    case ErrorCode::kUnauthenticated: return "unauthenticated";
    case ErrorCode::kPermissionDenied: return "permission_denied";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kAlreadyExists: return "already_exists";
    case ErrorCode::kConflict: return "conflict";
    case ErrorCode::kGone: return "gone";
    case ErrorCode::kTooLarge: return "too_large";
    case ErrorCode::kFailedPrecondition: return "failed_precondition";
    case ErrorCode::kResourceExhausted: return "resource_exhausted";
    case ErrorCode::kUnavailable: return "unavailable";
    case ErrorCode::kInternal: return "internal";
  }
  return "internal";
}

net::Response json_response(int status, const Json& body) {
  net::Response response;
  response.status = status;
  response.body = body.dump(-1, ' ', false, Json::error_handler_t::replace);
  response.body += '\n';
  return response;
}

net::Response error_response(const Error& error) {
  Json detail = {{"code", api_code(error.code)}, {"message", error.to_string()}};
  if (!error.field.empty()) {
    detail["field"] = error.field;
    detail["value"] = error.value;
  }
  net::Response response = json_response(http_status(error.code), {{"error", std::move(detail)}});
  if (error.code == ErrorCode::kUnauthenticated) response.headers.emplace_back("WWW-Authenticate", "Bearer");
  return response;
}

}  // namespace cnlab::server

#include "common/json_reader.h"
#include "net/net.h"

namespace cnlab::net {

ErrorCode error_code_for_status(int status) {
  switch (status) {
    case 400: return ErrorCode::kInvalidArgument;
    case 401: return ErrorCode::kUnauthenticated;
    case 403: return ErrorCode::kPermissionDenied;
    case 404: return ErrorCode::kNotFound;
    case 409: return ErrorCode::kConflict;
    case 410: return ErrorCode::kGone;
    case 413: return ErrorCode::kTooLarge;
    case 422: return ErrorCode::kFailedPrecondition;
    case 429: return ErrorCode::kResourceExhausted;
    case 503: return ErrorCode::kUnavailable;
    default: return status >= 500 ? ErrorCode::kUnavailable : ErrorCode::kInternal;
  }
}

Error error_from_response(int status, const std::string& body, const std::string& what) {
  Json parsed = Json::parse(body, nullptr, false);
  std::string prefix = what.empty() ? "" : what + ": ";
  if (parsed.is_object() && parsed.contains("error") && parsed["error"].is_object()) {
    const Json& e = parsed["error"];
    std::string field = e.value("field", ""), value = e.value("value", "");
    std::string message = e.value("message", "HTTP " + std::to_string(status));
    // The server's message already starts with `field "value": `, which Error::to_string puts in
    // front again: keep it once.
    const std::string named = field + " \"" + value + "\": ";
    if (!field.empty() && message.rfind(named, 0) == 0) message.erase(0, named.size());
    return Error::of(error_code_for_status(status), field, value, prefix + message);
  }
  return Error::of(error_code_for_status(status), "", "", prefix + (body.empty() ? "HTTP " + std::to_string(status) : body));
}

}  // namespace cnlab::net

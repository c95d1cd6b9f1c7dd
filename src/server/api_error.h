// How an Error becomes an HTTP response: one status per ErrorCode and a stable code string, in a
// JSON body {"error": {"code", "message", "field", "value"}} that names what was wrong.
#pragma once

#include "common/error.h"
#include "common/json_reader.h"
#include "net/net.h"

namespace cnlab::server {

int http_status(ErrorCode code);
std::string_view api_code(ErrorCode code);
net::Response error_response(const Error& error);
net::Response json_response(int status, const Json& body);

}  // namespace cnlab::server

// Private to src/net: request-target decoding and the small HTTP text helpers that the server and
// the client share.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "net/net.h"

struct ssl_st;  // OpenSSL's SSL

namespace cnlab::net::detail {

// Decodes %XX escapes (an invalid escape is kept as written); with `plus_as_space`, '+' is ' ' as
// in a query string.
void percent_decode(std::string_view text, bool plus_as_space, std::string& out);
std::string percent_decode(std::string_view text, bool plus_as_space);

// Fills `request.path` and `request.query` from `request.target` ("/a%20b?x=1&y" or an absolute
// "http://host/a?x=1").
void decode_target(Request& request);

// The JSON error body that every error the net layer answers itself carries:
// {"error":{"code":"too_large","message":"..."}}.
std::string error_body(std::string_view code, std::string_view message);

// True for a header name or value that can be written as is (no CR, LF or NUL; a name also no
// ':' and not empty).
bool valid_header_name(std::string_view name);
bool valid_header_value(std::string_view value);

// The DNS names of the certificate the peer of a finished TLS handshake presented, when it
// verified; empty otherwise.
std::vector<std::string> peer_dns_names(ssl_st* ssl);

}  // namespace cnlab::net::detail

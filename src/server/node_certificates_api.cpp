// Node certificates (POST /v1/nodes/{name}/certificate): the server's CA signs an agent's
// certificate signing request for the node name its credential is bound to, so that agents can
// stream a migrating job to each other over mutual TLS without the server in the path. The
// agent's key never leaves its node; the request's subject is ignored (the name comes from the
// credential, never from what the caller writes).
#include <fmt/format.h>

#include "net/tls_files.h"
#include "server/api.h"
#include "server/api_error.h"

namespace cnlab::server {
namespace {

// Short-lived, so that a node whose credential was revoked loses its certificate within two days
// without revocation lists: the agent renews when a third of it is left (after 32 h), and only a
// valid credential gets a new one.
constexpr int kNodeCertificateDays = 2;
constexpr size_t kMaxRequestBytes = 16 << 10;

}  // namespace

net::Response Api::issue_node_certificate(const Call& call) {
  const std::string& name = call.param("name");
  if (call.caller.node != name) {
    Error denied = Error::of(ErrorCode::kPermissionDenied, "node", name,
                             "only node " + name + "'s own credential gets its certificate");
    audit_refusal(call, "nodes.certificate", name, denied);
    return error_response(denied);
  }
  auto body = parse_body(call.request);
  if (!body) return error_response(body.error());
  JsonReader r(*body, "");
  r.only({"csr"});
  const std::string csr = r.string_or("csr", "");
  if (!r.status()) return error_response(r.status().error());
  if (csr.empty() || csr.size() > kMaxRequestBytes) {
    return error_response(Error::invalid_argument(
        "csr", fmt::format("{} bytes", csr.size()),
        fmt::format("a PEM certificate signing request of 1 to {} bytes", kMaxRequestBytes)));
  }
  auto cert = net::issue_node_cert(ctx_.dir.ca_cert(), ctx_.dir.ca_key(), csr, name, kNodeCertificateDays);
  if (!cert) return error_response(cert.error());
  auto info = net::read_cert_info(*cert);
  if (!info) return error_response(info.error());
  auto ca = read_file(ctx_.dir.ca_cert());
  if (!ca) return error_response(ca.error());
  const std::string expires_at = format_rfc3339(Time(std::chrono::seconds(info->not_after)));
  auto audited = commit(call, {}, "nodes.certificate", name, {{"dns_name", net::node_dns_name(name)}, {"expires_at", expires_at}});
  if (!audited) return error_response(audited.error());
  return json_response(201, {{"certificate", *cert}, {"ca", *ca}, {"expires_at", expires_at}});
}

}  // namespace cnlab::server

// The audit log: read it (admins) and check its hash chain.
#include "server/api.h"
#include "server/api_error.h"

namespace cnlab::server {
namespace {

Result<int64_t> integer_param(const net::Request& request, const std::string& name, int64_t fallback, int64_t min, int64_t max) {
  std::string text = request.query_value(name);
  if (text.empty()) return fallback;
  char* end = nullptr;
  long long value = std::strtoll(text.c_str(), &end, 10);
  if (*end != '\0' || value < min || value > max) {
    return Error::invalid_argument(name, text, "expected an integer in " + std::to_string(min) + ".." + std::to_string(max));
  }
  return value;
}

}  // namespace

net::Response Api::list_audit(const Call& call) {
  if (!call.caller.admin()) return error_response(Error::of(ErrorCode::kPermissionDenied, "role", "", "only cluster admins read the audit log"));
  auto from = integer_param(call.request, "from", 1, 1, INT64_MAX);
  if (!from) return error_response(from.error());
  auto limit = integer_param(call.request, "limit", 1000, 1, 10000);
  if (!limit) return error_response(limit.error());
  auto entries = ctx_.store.audit_log(*from, *limit);
  if (!entries) return error_response(entries.error());
  Json items = Json::array();
  for (const auto& e : *entries) {
    Json record = Json::parse(e.record, nullptr, false);
    items.push_back({{"seq", e.seq}, {"revision", e.revision}, {"record", record.is_discarded() ? Json(e.record) : record},
                     {"prev_hash", e.prev_hash}, {"hash", e.hash}});
  }
  return json_response(200, {{"items", std::move(items)}});
}

net::Response Api::verify_audit(const Call& call) {
  if (!call.caller.admin()) return error_response(Error::of(ErrorCode::kPermissionDenied, "role", "", "only cluster admins verify the audit log"));
  std::vector<auth::AuditLink> links;
  for (int64_t from = 1;;) {
    auto page = ctx_.store.audit_log(from, 10000);
    if (!page) return error_response(page.error());
    for (const auto& e : *page) links.push_back({e.seq, e.record, e.prev_hash, e.hash});
    if (page->size() < 10000) break;
    from = page->back().seq + 1;
  }
  auto problem = auth::verify_chain(links);
  Json out = {{"records", links.size()}, {"intact", !problem.has_value()}};
  if (!links.empty()) out["head"] = links.back().hash;
  if (problem) out["problem"] = {{"seq", problem->seq}, {"what", problem->what}};
  return json_response(200, out);
}

}  // namespace cnlab::server

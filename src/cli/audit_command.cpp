// `cnlab audit` (read the log) and `cnlab audit verify` (check its hash chain): through the API, or
// offline on a data directory's store with --data-dir.
#include <cstdio>
#include <filesystem>
#include <memory>

#include "auth/auth.h"
#include "cli/cli.h"
#include "cli/client_config.h"
#include "cli/commands.h"
#include "cli/output.h"
#include "store/store.h"

namespace cnlab::cli {


namespace {

int verify_offline(const std::string& data_dir) {
  std::string path = data_dir + "/store.db";
  if (!std::filesystem::exists(path)) {
    return report(Error::invalid_argument("--data-dir", data_dir, "no store.db here"));
  }
  auto store = store::open_sqlite_store({.path = path});
  if (!store) return report(store.error());
  std::vector<auth::AuditLink> links;
  for (int64_t from = 1;;) {
    auto page = (*store)->audit_log(from, 10000);
    if (!page) return report(page.error());
    for (const auto& e : *page) links.push_back({e.seq, e.record, e.prev_hash, e.hash});
    if (page->size() < 10000) break;
    from = page->back().seq + 1;
  }
  (*store)->close();
  if (auto problem = auth::verify_chain(links)) {
    std::printf("audit log BROKEN at record %lld: %s\n", static_cast<long long>(problem->seq), problem->what.c_str());
    return 1;
  }
  std::printf("audit log intact: %zu records, head %s\n", links.size(), links.empty() ? "-" : links.back().hash.c_str());
  return 0;
}

}  // namespace

void add_audit_commands(CLI::App& app, std::shared_ptr<ClientFlags> flags) {
  auto* audit = app.add_subcommand("audit", "Read the audit log, or `verify` its hash chain");
  auto from = std::make_shared<int64_t>(1);
  auto limit = std::make_shared<int64_t>(100);
  audit->add_option("--from", *from, "First record")->capture_default_str();
  audit->add_option("--limit", *limit, "Records to show")->capture_default_str();
  auto output = std::make_shared<std::string>();
  add_output_option(*audit, *output, /*allow_name=*/false);
  audit->footer("Example:\n  cnlab audit --from 1 --limit 50\n  cnlab audit -o json | jq '.items[].record.action'\n  cnlab audit verify");
  auto* verify = audit->add_subcommand("verify", "Check the hash chain; names the first edited, deleted or reordered record");
  auto data_dir = std::make_shared<std::string>();
  verify->add_option("--data-dir", *data_dir, "Check a data directory's store directly instead of asking the server");
  audit->callback([flags, from, limit, verify, data_dir, output] {
    auto format = parse_output_format(*output, /*allow_name=*/false);
    if (!format) std::exit(report(format.error()));
    if (verify->parsed()) {
      if (!data_dir->empty()) std::exit(verify_offline(*data_dir));
      auto result = call_json(*flags, "GET", "/v1/audit/verify");
      if (!result) std::exit(report(result.error()));
      if (!(*result).value("intact", false)) {
        std::printf("audit log BROKEN at record %lld: %s\n", (*result)["problem"].value("seq", 0LL),
                    (*result)["problem"].value("what", "").c_str());
        std::exit(1);
      }
      std::printf("audit log intact: %lld records, head %s\n", (*result).value("records", 0LL),
                  (*result).value("head", "-").c_str());
      std::exit(0);
    }
    auto result = call_json(*flags, "GET", "/v1/audit?from=" + std::to_string(*from) + "&limit=" + std::to_string(*limit));
    if (!result) std::exit(report(result.error()));
    if (*format == OutputFormat::kJson) {
      std::printf("%s\n", result->dump(2).c_str());
      std::exit(0);
    }
    Table table({{"SEQ", Table::Align::kRight}, {"TIME"}, {"ACTOR"}, {"ACTION"}, {"TARGET", Table::Align::kLeft, true},
                 {"OUTCOME", Table::Align::kLeft, true}});
    for (const auto& item : (*result)["items"]) {
      const Json& r = item["record"];
      std::string outcome = r.value("outcome", "");
      table.row();
      table.cell(std::to_string(item.value("seq", 0LL)));
      table.cell(r.value("time", ""));
      table.cell(r.value("actor", ""));
      table.cell(r.value("action", ""));
      table.cell(r.value("target", ""));
      table.cell(outcome, outcome == "ok" || outcome == "allowed" ? nullptr : kYellow);
    }
    table.print(stdout);
    std::exit(0);
  });
}

}  // namespace cnlab::cli

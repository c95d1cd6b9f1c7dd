// The backend-neutral part of the store: Op factories, the one-op convenience forms of txn and
// the input checks every backend shares.
#include "store/store.h"

#include <fmt/format.h>

#include "store/internal.h"

namespace cnlab::store {

Op Op::create(std::string kind, std::string key, std::string value) {
  return Op{Type::kCreate, std::move(kind), std::move(key), std::move(value), 0};
}

Op Op::update(std::string kind, std::string key, std::string value, int64_t expected_revision) {
  return Op{Type::kUpdate, std::move(kind), std::move(key), std::move(value), expected_revision};
}

Op Op::remove(std::string kind, std::string key, int64_t expected_revision) {
  return Op{Type::kRemove, std::move(kind), std::move(key), std::string(), expected_revision};
}

namespace {

Result<Record> single(Result<TxnResult> result) {
  if (!result) return result.error();
  CNLAB_CHECK(result->records.size() == 1);
  return std::move(result->records.front());
}

}  // namespace

Result<Record> Store::create(const std::string& kind, const std::string& key, const std::string& value) {
  std::vector<Op> ops;
  ops.push_back(Op::create(kind, key, value));
  return single(txn(std::move(ops)));
}

Result<Record> Store::update(const std::string& kind, const std::string& key, const std::string& value,
                             int64_t expected_revision) {
  std::vector<Op> ops;
  ops.push_back(Op::update(kind, key, value, expected_revision));
  return single(txn(std::move(ops)));
}

Result<Record> Store::remove(const std::string& kind, const std::string& key, int64_t expected_revision) {
  std::vector<Op> ops;
  ops.push_back(Op::remove(kind, key, expected_revision));
  return single(txn(std::move(ops)));
}

namespace internal {

namespace {

// Long values are cut in error messages: the field and the start are enough to find them.
std::string shown(std::string_view text) {
  constexpr size_t kShown = 64;
  if (text.size() <= kShown) return std::string(text);
  return std::string(text.substr(0, kShown)) + "...";
}

}  // namespace

Status check_name(std::string_view field, std::string_view text, bool allow_empty) {
  if (text.empty()) {
    if (allow_empty) return Status::ok();
    return Error::invalid_argument(std::string(field), "", "must not be empty");
  }
  if (text.size() > kMaxNameBytes) {
    return Error::invalid_argument(std::string(field), shown(text),
                                   fmt::format("is {} bytes; at most {} are allowed", text.size(), kMaxNameBytes));
  }
  for (char c : text) {
    auto byte = static_cast<unsigned char>(c);
    if (byte < 0x20 || byte == 0x7f) {
      return Error::invalid_argument(std::string(field), shown(text),
                                     fmt::format("contains the control character 0x{:02x}; only printable "
                                                 "characters are allowed",
                                                 byte));
    }
  }
  return Status::ok();
}

Status check_json_object(std::string_view field, std::string_view text) {
  size_t first = text.find_first_not_of(" \t\r\n");
  bool object = first != std::string_view::npos && text[first] == '{';
  // accept() validates without building a document: the store keeps the text as given.
  if (object) object = nlohmann::json::accept(text);
  if (!object) return Error::invalid_argument(std::string(field), shown(text), "must be a JSON object");
  return Status::ok();
}

Status check_txn(const std::vector<Op>& ops, const std::optional<std::string>& audit) {
  if (ops.empty() && !audit) {
    return Error::invalid_argument("ops", "", "a transaction needs at least one operation or an audit record");
  }
  for (const Op& op : ops) {
    if (auto ok = check_name("kind", op.kind); !ok) return ok;
    if (auto ok = check_name("key", op.key); !ok) return ok;
    if (op.type != Op::Type::kRemove) {
      if (auto ok = check_json_object("value", op.value); !ok) return ok;
    }
    if (op.expected_revision < 0) {
      return Error::invalid_argument("revision", std::to_string(op.expected_revision),
                                     "must be 0 (any) or a revision the key had");
    }
  }
  if (audit) {
    if (auto ok = check_json_object("audit", *audit); !ok) return ok;
  }
  return Status::ok();
}

}  // namespace internal

}  // namespace cnlab::store

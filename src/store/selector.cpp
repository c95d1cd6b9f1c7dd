// Kubernetes-style label and field selectors: parsing the query-string forms and matching them
// against an object's parsed value.
#include <cctype>
#include <string>
#include <string_view>

#include "common/strings.h"
#include "store/store.h"

namespace cnlab::store {

namespace {

constexpr std::string_view kLabelField = "labelSelector";
constexpr std::string_view kFieldField = "fieldSelector";

bool is_label_key_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.' || c == '/';
}

bool is_label_value_char(char c) {
  return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_' || c == '.';
}

bool is_path_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '_'; }

bool all_of(std::string_view text, bool (*pred)(char)) {
  for (char c : text) {
    if (!pred(c)) return false;
  }
  return true;
}

bool valid_path(std::string_view path) {
  if (path.empty()) return false;
  for (std::string_view segment : split(path, '.')) {
    if (segment.empty() || !all_of(segment, is_path_char)) return false;
  }
  return true;
}

// Splits "key=value", "key==value", "key!=value" or "key" into a term; false if no operator
// where one is required or the shape is wrong.
bool split_term(std::string_view term, Selector::Term& out) {
  size_t op = term.find_first_of("=!");
  if (op == std::string_view::npos) {
    out.path = std::string(term);
    out.op = Selector::Term::Op::kExists;
    return true;
  }
  out.path = std::string(trim(term.substr(0, op)));
  size_t value_start;
  if (term[op] == '!') {
    if (op + 1 >= term.size() || term[op + 1] != '=') return false;
    out.op = Selector::Term::Op::kNe;
    value_start = op + 2;
  } else {
    out.op = Selector::Term::Op::kEq;
    value_start = op + 1 < term.size() && term[op + 1] == '=' ? op + 2 : op + 1;
  }
  out.value = std::string(trim(term.substr(value_start)));
  return true;
}

Result<std::vector<Selector::Term>> parse_terms(std::string_view text, bool labels) {
  std::vector<Selector::Term> terms;
  if (trim(text).empty()) return terms;
  std::string_view field = labels ? kLabelField : kFieldField;
  for (std::string_view raw : split(text, ',')) {
    std::string_view term = trim(raw);
    Selector::Term parsed;
    bool ok = !term.empty() && split_term(term, parsed);
    if (ok && labels) {
      ok = !parsed.path.empty() && all_of(parsed.path, is_label_key_char) && parsed.path.size() <= 317 &&
           all_of(parsed.value, is_label_value_char) && parsed.value.size() <= 63;
    } else if (ok) {
      ok = valid_path(parsed.path) && parsed.op != Selector::Term::Op::kExists &&
           parsed.value.find_first_of("=!") == std::string::npos;
    }
    if (!ok) {
      std::string message =
          labels ? "expected key=value, key==value, key!=value or key, separated by commas, where keys are "
                   "letters, digits and -_./ and values letters, digits and -_. (at most 63)"
                 : "expected path=value, path==value or path!=value, separated by commas, where a path is "
                   "dot-separated names such as spec.node";
      return Error::invalid_argument(std::string(field), std::string(term), std::move(message));
    }
    terms.push_back(std::move(parsed));
  }
  return terms;
}

// The text a field compares as: strings unquoted, other scalars as JSON prints them.
std::string as_text(const nlohmann::json* value) {
  if (value == nullptr || value->is_null()) return std::string();
  if (value->is_string()) return value->get<std::string>();
  return value->dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

const nlohmann::json* member(const nlohmann::json& json, std::string_view name) {
  if (json.is_object()) {
    auto it = json.find(name);
    return it == json.end() ? nullptr : &*it;
  }
  if (json.is_array() && !name.empty() && all_of(name, [](char c) { return c >= '0' && c <= '9'; })) {
    size_t index = 0;
    for (char c : name) index = index * 10 + static_cast<size_t>(c - '0');
    return index < json.size() ? &json[index] : nullptr;
  }
  return nullptr;
}

const nlohmann::json* at_path(const nlohmann::json& json, std::string_view path) {
  const nlohmann::json* at = &json;
  for (std::string_view segment : split(path, '.')) {
    at = member(*at, segment);
    if (at == nullptr) return nullptr;
  }
  return at;
}

bool term_matches(const Selector::Term& term, const nlohmann::json* value) {
  switch (term.op) {
    case Selector::Term::Op::kExists: return value != nullptr && !value->is_null();
    case Selector::Term::Op::kEq: return value != nullptr && as_text(value) == term.value;
    case Selector::Term::Op::kNe: return value == nullptr || as_text(value) != term.value;
  }
  return false;
}

}  // namespace

Result<Selector> Selector::parse(std::string_view label_selector, std::string_view field_selector) {
  auto labels = parse_terms(label_selector, /*labels=*/true);
  if (!labels) return labels.error();
  auto fields = parse_terms(field_selector, /*labels=*/false);
  if (!fields) return fields.error();
  Selector selector;
  selector.labels = std::move(*labels);
  selector.fields = std::move(*fields);
  return selector;
}

bool Selector::matches(const nlohmann::json& json) const {
  const nlohmann::json* labels_json = nullptr;
  if (!labels.empty()) {
    if (const nlohmann::json* metadata = member(json, "metadata")) {
      labels_json = member(*metadata, "labels");
      if (labels_json != nullptr && !labels_json->is_object()) labels_json = nullptr;
    }
  }
  for (const Term& term : labels) {
    const nlohmann::json* value = labels_json == nullptr ? nullptr : member(*labels_json, term.path);
    if (!term_matches(term, value)) return false;
  }
  for (const Term& term : fields) {
    // A missing field compares as "": "status.phase!=Running" matches an object with no phase yet.
    const nlohmann::json* value = at_path(json, term.path);
    switch (term.op) {
      case Term::Op::kExists:
        if (value == nullptr || value->is_null()) return false;
        break;
      case Term::Op::kEq:
        if (as_text(value) != term.value) return false;
        break;
      case Term::Op::kNe:
        if (as_text(value) == term.value) return false;
        break;
    }
  }
  return true;
}

}  // namespace cnlab::store

// The face of src/store: a versioned key-value store of API objects with compare-and-swap and
// watch, shaped so that an etcd v3 backend can implement it (revision = etcd's mod_revision, one
// cluster-wide revision counter, watch = etcd watch, txn = etcd Txn). The embedded default is
// SQLite (sqlite_store.h).
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "common/json_reader.h"
#include "common/result.h"

namespace cnlab::store {

// One stored object. `value` is the object's JSON text as the API writes it; the store never
// interprets it except to read `metadata.labels` and the fields a FieldSelector names.
struct Record {
  std::string kind;  // "jobs", "nodes", "projects", ...
  std::string key;   // unique within the kind, e.g. "vision/train-7f3a"
  std::string value;
  int64_t create_revision = 0;
  int64_t mod_revision = 0;  // the revision of the write that produced this value

  bool operator==(const Record&) const = default;
};

// Errors a store returns, beyond ErrorCode::kInvalidArgument and kInternal:
//   kNotFound          get/update/remove of a key that does not exist
//   kAlreadyExists     create of a key that exists
//   kConflict          compare-and-swap lost: `field` is "revision", `value` the revision asked
//                      for, and the message names the current one
//   kGone              watch/list from a revision older than the kept history; the message says
//                      "resync from revision N" and `value` is N
//   kUnavailable       the store is closed or its disk failed

// Kubernetes-style selectors. Labels: "app=web,tier!=db,gpu" (equality, inequality, existence),
// read from the value's `metadata.labels`; "a!=b" also matches objects without the label a.
// Fields: "spec.node=gpu-1,status.phase!=Running" (dotted JSON paths into the value, compared as
// text: strings unquoted, numbers and booleans as JSON prints them, a missing field or null as "").
struct Selector {
  struct Term {
    std::string path;        // label key, or dotted JSON path for field terms
    std::string value;
    enum class Op { kEq, kNe, kExists } op = Op::kEq;
  };
  std::vector<Term> labels;
  std::vector<Term> fields;

  bool empty() const { return labels.empty() && fields.empty(); }
  // Parses the query-string forms; errors (kInvalidArgument) name "labelSelector" or
  // "fieldSelector" as the field and the bad term as the value.
  static Result<Selector> parse(std::string_view label_selector, std::string_view field_selector);
  // True when `json` (an object's parsed value) satisfies every term.
  bool matches(const nlohmann::json& json) const;
};

struct ListOptions {
  std::string prefix;            // only keys starting with this
  Selector selector;
  int64_t limit = 0;             // 0 = no limit; otherwise at most this many items
  std::string continue_token;    // from the previous page's ListResult
};

// Paging: each page is read from one consistent snapshot, and a page that follows a continue
// token resumes after the previous page's last key at the store's current state. `revision` stays
// the first page's revision on every page, so list-all-pages-then-watch-from-`revision` replays
// every change made while paging (a key on a later page may already show a newer value; the
// replayed events bring it to the same end state). A token whose revision is older than the kept
// history still continues from its key; the watch from that revision then gives kGone.
struct ListResult {
  std::vector<Record> items;     // in key order
  int64_t revision = 0;          // the store revision the list (its first page) was read at
  std::string continue_token;    // empty when this was the last page
};

enum class EventType { kPut, kDelete };

// A change. For kPut `record` is the new value; for kDelete it is the last value with
// `mod_revision` set to the deletion's revision.
struct Event {
  EventType type = EventType::kPut;
  Record record;
  bool created = false;  // kPut that created the key
};

// One operation of a transaction. `expected_revision`: for update/remove, 0 means "any", otherwise
// the mod_revision the key must have (compare-and-swap).
struct Op {
  enum class Type { kCreate, kUpdate, kRemove } type = Type::kCreate;
  std::string kind;
  std::string key;
  std::string value;
  int64_t expected_revision = 0;

  static Op create(std::string kind, std::string key, std::string value);
  static Op update(std::string kind, std::string key, std::string value, int64_t expected_revision);
  static Op remove(std::string kind, std::string key, int64_t expected_revision);
};

// An audit record appended in the same atomic commit as a transaction's operations. The store
// numbers it (`seq`), links it to the previous record's hash and hashes it (lowercase hex SHA-256
// of prev_hash + "\n" + record, the record's text exactly as given), so the audit log is a hash
// chain in commit order. A transaction that fails leaves no audit record.
struct AuditEntry {
  int64_t seq = 0;
  int64_t revision = 0;  // the store revision of the commit it was part of
  std::string record;    // a JSON object: who, what, when, outcome
  std::string prev_hash; // hex; 64 zeros for the first
  std::string hash;      // hex
};

struct TxnResult {
  int64_t revision = 0;          // the revision of this commit
  std::vector<Record> records;   // per op: the new record (create/update) or the removed one
};

// Each call is safe from any thread. Writes are durable when they return (or when their callback
// runs): a crash after that loses nothing; a crash before leaves nothing of the transaction.
class Store {
 public:
  virtual ~Store() = default;

  virtual Result<Record> get(const std::string& kind, const std::string& key) = 0;
  virtual Result<ListResult> list(const std::string& kind, const ListOptions& options) = 0;

  // Applies every op or none; the first failing op's error is returned. `audit`, when given, is
  // appended to the audit chain in the same commit.
  virtual Result<TxnResult> txn(std::vector<Op> ops, std::optional<std::string> audit = std::nullopt) = 0;
  // The same, finishing on the store's own thread; the callback must not block (nor call txn()).
  // Many concurrent transactions share one disk sync (group commit). Invalid input and a closed
  // store are answered at once, on the calling thread, before txn_async returns.
  virtual void txn_async(std::vector<Op> ops, std::optional<std::string> audit,
                         std::function<void(Result<TxnResult>)> done) = 0;

  // Convenience forms of txn with one op.
  Result<Record> create(const std::string& kind, const std::string& key, const std::string& value);
  Result<Record> update(const std::string& kind, const std::string& key, const std::string& value,
                        int64_t expected_revision);
  Result<Record> remove(const std::string& kind, const std::string& key, int64_t expected_revision);

  // The latest committed revision.
  virtual int64_t revision() = 0;

  // Audit chain records with seq in [from_seq, from_seq + limit), in order.
  virtual Result<std::vector<AuditEntry>> audit_log(int64_t from_seq, int64_t limit) = 0;

  // The changes to a kind (and key prefix) with revisions in (after_revision, up_to_revision], in
  // revision order: what a watch from `after_revision` would replay. kGone ("resync from revision
  // N") when `after_revision` is older than the kept history. (etcd: a watch from the revision,
  // ended at the progress notification for `up_to_revision`.)
  virtual Result<std::vector<Event>> history(const std::string& kind, const std::string& prefix,
                                             int64_t after_revision, int64_t up_to_revision) = 0;

  // Watches a kind (and key prefix) for changes after `from_revision` (0 = from now on): first the
  // kept history after it, then live events, each exactly once and in revision order. A revision
  // older than the kept history gives kGone ("resync from revision N") from watch() itself.
  // `on_events` runs on the store's notifier thread and must not block: a consumer that cannot
  // keep up queues what it gets with a bound of its own and cancels (destroys the handle) when the
  // bound is passed. `on_close` runs once if the store ends the watch (close(), a disk error).
  struct WatchCallbacks {
    std::function<void(const std::vector<Event>&)> on_events;
    std::function<void(const Error&)> on_close;
  };
  class WatchHandle {
   public:
    virtual ~WatchHandle() = default;  // cancels the watch; no callback runs after the destructor returns
  };
  virtual Result<std::unique_ptr<WatchHandle>> watch(const std::string& kind, const std::string& prefix,
                                                     int64_t from_revision, WatchCallbacks callbacks) = 0;

  // Stops accepting writes (later calls fail with kUnavailable), commits the transactions already
  // queued, ends every watch (on_close with kUnavailable) and releases the database. Idempotent;
  // not from a store callback. The destructor calls it.
  virtual void close() = 0;
};

struct SqliteOptions {
  std::string path;                   // the database file; created with its parent directory
  int64_t history_revisions = 100000; // events kept for watch-from-revision, beyond that: kGone
  int max_batch = 1024;               // transactions per group commit at most
};

// Opens (creating or migrating the schema of) a SQLite store: WAL, synchronous=FULL, one writer
// thread doing group commit, readers on their own connections. Refuses a database whose schema is
// newer than this build's (kFailedPrecondition, leaving it untouched) and a database that another
// store, in this process or another, has open (kUnavailable: it holds "<path>.lock").
Result<std::unique_ptr<Store>> open_sqlite_store(const SqliteOptions& options);

}  // namespace cnlab::store

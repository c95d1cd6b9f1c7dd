// Private to src/store: small RAII wrappers over the SQLite C API (a connection, a prepared
// statement) and the mapping of SQLite result codes to Errors.
#pragma once

#include <sqlite3.h>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>

#include "common/result.h"

namespace cnlab::store::sqlite {

// A prepared statement. Text is bound without copying: the bound text must outlive the step.
class Stmt {
 public:
  Stmt() = default;
  explicit Stmt(sqlite3_stmt* stmt) : stmt_(stmt) {}
  Stmt(Stmt&& other) noexcept : stmt_(other.stmt_) { other.stmt_ = nullptr; }
  Stmt& operator=(Stmt&& other) noexcept {
    std::swap(stmt_, other.stmt_);
    return *this;
  }
  Stmt(const Stmt&) = delete;
  Stmt& operator=(const Stmt&) = delete;
  ~Stmt() { sqlite3_finalize(stmt_); }

  void bind(int index, int64_t value) { sqlite3_bind_int64(stmt_, index, value); }
  void bind(int index, std::string_view text) {
    // A null pointer would bind SQL NULL; an empty string must stay an empty string.
    sqlite3_bind_text(stmt_, index, text.empty() ? "" : text.data(), static_cast<int>(text.size()), SQLITE_STATIC);
  }
  // SQLITE_ROW, SQLITE_DONE or an error code.
  int step() { return sqlite3_step(stmt_); }
  void reset() { sqlite3_reset(stmt_); }

  int64_t int64(int column) { return sqlite3_column_int64(stmt_, column); }
  std::string_view text(int column) {
    const auto* data = reinterpret_cast<const char*>(sqlite3_column_text(stmt_, column));
    int size = sqlite3_column_bytes(stmt_, column);
    return data == nullptr ? std::string_view() : std::string_view(data, static_cast<size_t>(size));
  }
  std::string string(int column) { return std::string(text(column)); }

 private:
  sqlite3_stmt* stmt_ = nullptr;
};

// Resets a statement when it goes out of scope, so that no statement keeps a read snapshot or a
// lock open after its caller is done with it.
class ResetOnExit {
 public:
  explicit ResetOnExit(Stmt& stmt) : stmt_(stmt) {}
  ~ResetOnExit() { stmt_.reset(); }
  ResetOnExit(const ResetOnExit&) = delete;
  ResetOnExit& operator=(const ResetOnExit&) = delete;

 private:
  Stmt& stmt_;
};

// One connection, used by one thread at a time (opened with SQLITE_OPEN_NOMUTEX).
class Db {
 public:
  static Result<std::unique_ptr<Db>> open(const std::string& path);
  ~Db();
  Db(const Db&) = delete;
  Db& operator=(const Db&) = delete;

  Status exec(const char* sql);
  // A statement kept for the connection's lifetime (SQLITE_PREPARE_PERSISTENT).
  Result<Stmt> prepare(std::string_view sql);
  // Runs a one-row, one-column integer query such as "PRAGMA user_version".
  Result<int64_t> query_int(const char* sql);

  // The Error for a failed call: kUnavailable for disk and lock failures, kInternal otherwise.
  Error error(int rc, std::string_view what) const;
  sqlite3* get() const { return db_; }

 private:
  explicit Db(sqlite3* db) : db_(db) {}
  sqlite3* db_;
};

}  // namespace cnlab::store::sqlite

#include "store/sqlite_db.h"

#include <fmt/format.h>

namespace cnlab::store::sqlite {

Result<std::unique_ptr<Db>> Db::open(const std::string& path) {
  sqlite3* db = nullptr;
  int rc =
      sqlite3_open_v2(path.c_str(), &db, SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX, nullptr);
  if (rc != SQLITE_OK) {
    std::string message = db != nullptr ? sqlite3_errmsg(db) : sqlite3_errstr(rc);
    sqlite3_close_v2(db);
    return Error::of(ErrorCode::kUnavailable, "path", path, "cannot open the database: " + message);
  }
  sqlite3_extended_result_codes(db, 1);
  return std::unique_ptr<Db>(new Db(db));
}

Db::~Db() { sqlite3_close_v2(db_); }

Status Db::exec(const char* sql) {
  char* message = nullptr;
  int rc = sqlite3_exec(db_, sql, nullptr, nullptr, &message);
  if (rc == SQLITE_OK) return Status::ok();
  std::string text = message != nullptr ? message : sqlite3_errstr(rc);
  sqlite3_free(message);
  Error error = this->error(rc, sql);
  error.message = fmt::format("sqlite \"{}\": {}", sql, text);
  return error;
}

Result<Stmt> Db::prepare(std::string_view sql) {
  sqlite3_stmt* stmt = nullptr;
  int rc = sqlite3_prepare_v3(db_, sql.data(), static_cast<int>(sql.size()), SQLITE_PREPARE_PERSISTENT, &stmt, nullptr);
  if (rc != SQLITE_OK) return error(rc, sql);
  return Stmt(stmt);
}

Result<int64_t> Db::query_int(const char* sql) {
  auto stmt = prepare(sql);
  if (!stmt) return stmt.error();
  int rc = stmt->step();
  if (rc != SQLITE_ROW) return error(rc, sql);
  return stmt->int64(0);
}

Error Db::error(int rc, std::string_view what) const {
  ErrorCode code = ErrorCode::kInternal;
  switch (rc & 0xff) {
    case SQLITE_IOERR:
    case SQLITE_FULL:
    case SQLITE_CORRUPT:
    case SQLITE_NOTADB:
    case SQLITE_CANTOPEN:
    case SQLITE_READONLY:
    case SQLITE_BUSY:
    case SQLITE_LOCKED:
    case SQLITE_PROTOCOL:
    case SQLITE_NOLFS:
    case SQLITE_PERM: code = ErrorCode::kUnavailable; break;
    default: break;
  }
  return Error::of(code, "", "", fmt::format("sqlite \"{}\": {} ({})", what, sqlite3_errmsg(db_), sqlite3_errstr(rc)));
}

}  // namespace cnlab::store::sqlite

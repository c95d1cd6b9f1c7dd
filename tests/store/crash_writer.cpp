// store_crash_writer DB TAG THREADS: writes to the store at DB from THREADS threads until killed.
// Each transaction of thread i, number j, creates crash/TAG-i-j-a and crash/TAG-i-j-b, creates
// (j = 0) or compare-and-swaps (j > 0) counters/TAG-i to {"n": j + 1}, and carries an audit
// record; once txn() returns it prints "TAG-i-j" on its own line to stdout. The kill -9 test in
// sqlite_store_test.cpp reads those lines, kills this process mid-write and checks the store.
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <vector>

#include <fmt/format.h>

#include "store/store.h"

namespace {

using cnlab::store::Op;
using cnlab::store::Store;

[[noreturn]] void die(const std::string& message) {
  std::string line = "store_crash_writer: " + message + "\n";
  (void)!::write(2, line.data(), line.size());
  std::_Exit(3);
}

void write_loop(Store& store, const std::string& tag, int thread) {
  int64_t counter_revision = 0;
  for (int64_t j = 0;; ++j) {
    std::string id = fmt::format("{}-{}-{}", tag, thread, j);
    std::string value =
        fmt::format(R"({{"metadata":{{"name":"{}"}},"spec":{{"payload":"{}"}}}})", id, std::string(64, 'x'));
    std::string counter_key = fmt::format("{}-{}", tag, thread);
    std::string counter = fmt::format(R"({{"n":{}}})", j + 1);
    std::vector<Op> ops;
    ops.push_back(Op::create("crash", id + "-a", value));
    ops.push_back(Op::create("crash", id + "-b", value));
    ops.push_back(j == 0 ? Op::create("counters", counter_key, counter)
                         : Op::update("counters", counter_key, counter, counter_revision));
    auto result = store.txn(std::move(ops), fmt::format(R"({{"who":"crash","what":"{}"}})", id));
    if (!result) die(id + ": " + result.error().to_string());
    counter_revision = result->revision;
    // One write(2) per line: a pipe delivers it whole, and nothing is buffered when the kill comes.
    std::string line = id + "\n";
    if (::write(1, line.data(), line.size()) != static_cast<ssize_t>(line.size())) die("write to stdout failed");
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) die("usage: store_crash_writer DB TAG THREADS");
  cnlab::store::SqliteOptions options;
  options.path = argv[1];
  auto store = cnlab::store::open_sqlite_store(options);
  if (!store) die(store.error().to_string());
  int threads = std::atoi(argv[3]);
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i) workers.emplace_back(write_loop, std::ref(**store), std::string(argv[2]), i);
  for (auto& worker : workers) worker.join();  // never: the test kills this process
  return 0;
}

// Runs `cnlab <args>` in process, as main() would parse it, for the command-line tests.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <string>
#include <vector>

#include "sim/sim_command.h"

namespace cnlab::sim::testing {

struct Outcome {
  int code = 0;  // the exit code the command chose (0 when it returned normally)
  std::string out, err;
};

inline Outcome run_cli(std::vector<std::string> args) {
  CLI::App app{"cnlab"};
  add_sim_commands(app);
  std::vector<std::string> argv_text = {"cnlab"};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  Outcome out;
  ::testing::internal::CaptureStderr();
  ::testing::internal::CaptureStdout();
  try {
    app.parse(static_cast<int>(argv.size()), argv.data());
  } catch (const CLI::ParseError& e) {
    out.code = e.get_exit_code();
  }
  out.out = ::testing::internal::GetCapturedStdout();
  out.err = ::testing::internal::GetCapturedStderr();
  return out;
}

inline void write(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

}  // namespace cnlab::sim::testing

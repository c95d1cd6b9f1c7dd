// A CRIU that holds one of its commands: a script standing in for `criu` that, when run as
// `criu <command> ...` for the command written in `<dir>/hold`, creates `<dir>/held` and waits a
// minute before running the real CRIU with the same arguments; every other command goes straight
// to the real one. It is what a restore (or a page pull) slow past a migration's timeout looks
// like, made on demand. One process throughout (the script execs CRIU): killing it leaves nothing.
#pragma once

#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <string>

namespace cnlab::test_fakes {

// Writes the script as `<dir>/criu` and returns its path; `real` is the CRIU it runs.
inline std::string write_held_criu(const std::filesystem::path& dir, const std::string& real) {
  const std::filesystem::path script = dir / "criu";
  std::ofstream(script) << "#!/usr/bin/python3\n"
                        << "import os, sys, time\n"
                        << "hold = os.path.join('" << dir.string() << "', 'hold')\n"
                        << "if os.path.exists(hold) and sys.argv[1:2] == [open(hold).read().strip()]:\n"
                        << "    open(os.path.join('" << dir.string() << "', 'held'), 'w').close()\n"
                        << "    time.sleep(60)\n"
                        << "os.execv('" << real << "', ['" << real << "'] + sys.argv[1:])\n";
  ::chmod(script.c_str(), 0755);
  return script.string();
}

// From now on the script in `dir` holds `criu <command>`.
inline void hold_criu_command(const std::filesystem::path& dir, const std::string& command) {
  std::ofstream(dir / "hold") << command;
}

}  // namespace cnlab::test_fakes

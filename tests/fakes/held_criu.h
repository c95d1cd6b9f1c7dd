// A CRIU that holds one of its commands: a script standing in for `criu` that, when run as
// `criu <command> ...` for the command written in `<dir>/hold` ("<command> [seconds]"), creates
// `<dir>/held` and waits (a minute unless told) before running the real CRIU with the same
// arguments; every other command goes straight to the real one. It is what a restore (or a page pull) slow past a migration's timeout looks
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
                        << "words = open(hold).read().split() if os.path.exists(hold) else []\n"
                        << "if words and sys.argv[1:2] == words[:1]:\n"
                        << "    open(os.path.join('" << dir.string() << "', 'held'), 'w').close()\n"
                        << "    time.sleep(float(words[1]) if len(words) > 1 else 60)\n"
                        << "os.execv('" << real << "', ['" << real << "'] + sys.argv[1:])\n";
  ::chmod(script.c_str(), 0755);
  return script.string();
}

// From now on the script in `dir` holds `criu <command>` for `seconds`.
inline void hold_criu_command(const std::filesystem::path& dir, const std::string& command, int seconds = 60) {
  std::ofstream(dir / "hold") << command << ' ' << seconds;
}

}  // namespace cnlab::test_fakes

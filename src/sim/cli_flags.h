// How the sim commands declare their flags. Private to src/sim.
#pragma once

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

namespace cnlab::sim {

// A text flag that CLI11 accepts with no value or repeated, so that the command's own checks (not
// CLI11's) report a missing or repeated value, naming the flag and what is allowed.
inline void add_text_flag(CLI::App* command, const char* name, std::vector<std::string>& into,
                          const std::string& help) {
  command->add_option(name, into, help)->expected(0, 1)->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}

}  // namespace cnlab::sim

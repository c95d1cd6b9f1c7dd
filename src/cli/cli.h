// The face of src/cli: the user commands that talk to a server (`cnlab admin ...`, `cnlab audit`).
#pragma once

#include <CLI/CLI.hpp>

namespace cnlab::cli {

void add_client_commands(CLI::App& app);

}  // namespace cnlab::cli

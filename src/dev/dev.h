// The face of src/dev: `cnlab dev`, a complete single-machine CNLab (control plane and node agent
// in one process) for a laptop, a single GPU box, a demo and the end-to-end tests.
#pragma once

#include <CLI/CLI.hpp>

namespace cnlab::dev {

void add_dev_commands(CLI::App& app);

}  // namespace cnlab::dev

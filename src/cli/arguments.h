// Checks for the arguments that the client commands put into a request's URL path, or wait on.
#pragma once

#include <CLI/CLI.hpp>

#include <string>

namespace cnlab::cli {

// The value must be a name as the server makes them (model::validate_name: a job id, a node, a
// token's id). A mistyped or hostile value ("../nodes", "a?b") is refused while the flags are
// parsed (exit 2), naming the argument, the value and what is allowed, so it never reaches the
// server as another path or a query. `what` names the kind ("job id"); `hint` says where to find
// one ("such as train-6f3ae726 (cnlab ps lists them)").
CLI::Validator object_name(const std::string& what, const std::string& hint);
CLI::Validator job_id();     // object_name for the JOB argument of the job commands
CLI::Validator node_name();  // object_name for a node: --to, --node, NAME of `admin node`

// Whole seconds above 0. CLI::PositiveNumber would print its range as a 300-digit double.
CLI::Validator positive_seconds();

}  // namespace cnlab::cli

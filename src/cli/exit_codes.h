// The exit codes of the client commands, documented in docs/cli.md so scripts can rely on them.
// `cnlab run` (attached) exits with the job's own code instead; see run_command.cpp.
#pragma once

#include "common/error.h"

namespace cnlab::cli {

enum ExitCode : int {
  kExitOk = 0,
  kExitFailed = 1,         // anything not listed below
  kExitUsage = 2,          // bad flags or input (the message names the field)
  kExitNotFound = 3,       // no such job, node, project... (or not visible to you)
  kExitAuth = 4,           // no credential, an expired or revoked one, or a role that does not allow it
  kExitUnreachable = 5,    // the server could not be reached (the message names the URL)
  kExitRefused = 6,        // well-formed but refused: over quota, can never fit, deadline cannot be met
  kExitRunError = 125,     // `cnlab run`: the job never ran (refused, unreachable, workspace too large)
  kExitInterrupted = 130,  // `cnlab run`: cancelled with Ctrl-C
};

inline int exit_code_for(ErrorCode code) {
  switch (code) {
    case ErrorCode::kInvalidArgument:
    case ErrorCode::kTooLarge: return kExitUsage;
    case ErrorCode::kNotFound: return kExitNotFound;
    case ErrorCode::kUnauthenticated:
    case ErrorCode::kPermissionDenied: return kExitAuth;
    case ErrorCode::kUnavailable: return kExitUnreachable;
    case ErrorCode::kFailedPrecondition:
    case ErrorCode::kResourceExhausted: return kExitRefused;
    default: return kExitFailed;
  }
}

}  // namespace cnlab::cli

// cnlab-shim: the per-job supervisor as its own small executable. `cnlab agent-shim` does the same,
// but loading the whole `cnlab` binary (OpenSSL, SQLite, libarchive and the ICU data it pulls in)
// costs ~20 ms per job start; this one links only the runtime. The agent uses it when it sits
// beside the `cnlab` binary.
#include "agent/runtime/runtime.h"

int main(int argc, char** argv) { return cnlab::agent::shim_main(argc, argv); }

// cnlab_test_shim: the shim executable for the runtime tests (the agent uses `cnlab agent-shim`).
#include "agent/runtime/runtime.h"

int main(int argc, char** argv) { return cnlab::agent::shim_main(argc, argv); }

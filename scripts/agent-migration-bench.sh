#!/usr/bin/env bash
# The pause of a live migration through two real agents on this machine (a server, two agents,
# CRIU, the dump over mutual TLS), for a job holding N MiB of random bytes, stop-and-copy beside
# post-copy: the e2e test LargeMigrationTest.AJobHolding... run once per size and mode (not the
# one whose source is killed mid-pull), its Migrated event read from the test's XML report. Needs
# root and CRIU, like the test. Usage:
#   scripts/agent-migration-bench.sh [BUILD_DIR] [SIZES_MIB]   (default: build 256,1024,4096)
set -euo pipefail
build=${1:-build}
sizes=${2:-256,1024,4096}
binary="$build/tests/e2e/e2e_migration_tests"
if [[ $(id -u) -ne 0 ]]; then
  echo "agent-migration-bench: not run (CRIU dumps other processes only as root)"
  exit 0
fi
[[ -x $binary ]] || { echo "agent-migration-bench: $binary is not built" >&2; exit 1; }
report=$(mktemp)
trap 'rm -f "$report"' EXIT
printf '%-10s %-14s %12s  %s\n' "memory" "mode" "pause ms" "outcome"
for mib in ${sizes//,/ }; do
  for mode in stop-and-copy post-copy; do
    post_copy=0
    [[ $mode == post-copy ]] && post_copy=1
    if CNLAB_E2E_MIGRATION_MIB=$mib CNLAB_E2E_MIGRATION_POST_COPY=$post_copy \
        "$binary" --gtest_filter='LargeMigrationTest.AJobHolding*' --gtest_output="xml:$report" >/dev/null 2>&1; then
      outcome=ok
    else
      outcome="FAILED (run the test alone to see why)"
    fi
    pause=$(grep -o 'paused [0-9]* ms' "$report" | head -1 | grep -o '[0-9]*' || echo "-")
    printf '%-10s %-14s %12s  %s\n' "${mib} MiB" "$mode" "$pause" "$outcome"
  done
done

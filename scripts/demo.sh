#!/usr/bin/env bash
# `make demo`: CNLab end to end on this machine. Starts `cnlab dev` in the background (its own data
# and CLI config under out/demo/, so your ~/.config/cnlab is left alone), runs the example training
# job through `cnlab run` with its output streamed, shows where its artifacts landed and what the
# cluster looks like, then stops the cluster it started.
set -euo pipefail

BIN=${BIN:-build/cnlab}
OUT=${OUT:-out/demo}
GPU=${GPU:-h100-25}

[ -x "$BIN" ] || { echo "demo: $BIN is not built; run make build" >&2; exit 1; }
rm -rf "$OUT"
mkdir -p "$OUT"
export XDG_CONFIG_HOME="$PWD/$OUT/config"   # the CLI below reads the config cnlab dev writes here

say() { printf '\n\033[1m$ %s\033[0m\n' "$*"; }

DEV_PID=
stop_cluster() {
  if [ -n "$DEV_PID" ] && kill -0 "$DEV_PID" 2>/dev/null; then
    kill -INT "$DEV_PID"
    wait "$DEV_PID" 2>/dev/null || true
    echo "demo: the cluster is stopped (its state is in $OUT/data)"
  fi
}
trap stop_cluster EXIT

say "cnlab dev --data-dir $OUT/data --listen 127.0.0.1:0 &"
"$BIN" dev --data-dir "$OUT/data" --listen 127.0.0.1:0 --metrics-listen "" --stop-grace 2s \
  >"$OUT/dev.out" 2>"$OUT/dev.log" &
DEV_PID=$!
for _ in $(seq 1 600); do
  grep -q '^try:' "$OUT/dev.out" 2>/dev/null && break
  kill -0 "$DEV_PID" 2>/dev/null || { echo "demo: cnlab dev exited; its log:" >&2; cat "$OUT/dev.log" >&2; exit 1; }
  sleep 0.1
done
grep -q '^try:' "$OUT/dev.out" || { echo "demo: cnlab dev did not start within 60 s; log in $OUT/dev.log" >&2; exit 1; }
cat "$OUT/dev.out"

# The working directory (this checkout, less what .gitignore leaves out) is the job's workspace.
say "cnlab run examples/train.py --gpu $GPU"
status=0
"$BIN" run examples/train.py --gpu "$GPU" || status=$?
echo "(cnlab run exited with $status: the job's own exit code)"

say "ls -l cnlab-artifacts/*/"
ls -l cnlab-artifacts/*/ 2>/dev/null || echo "(no artifacts)"

# A second tenant holds half of a GPU for a while, so the block bars show who holds what.
say "cnlab run --detach --gpu h100-50 --name notebook -- sleep 600"
NOTEBOOK=$("$BIN" run --detach --gpu h100-50 --name notebook -- sleep 600 | tail -1)
for _ in $(seq 1 100); do
  "$BIN" describe "$NOTEBOOK" -o json 2>/dev/null | grep -q '"phase": *"Running"' && break
  sleep 0.1
done
say "cnlab ps"
"$BIN" ps || true
say "cnlab gpus"
"$BIN" gpus || true
say "cnlab cancel $NOTEBOOK"
"$BIN" cancel "$NOTEBOOK" || true
say "cnlab nodes"
"$BIN" nodes || true
exit "$status"

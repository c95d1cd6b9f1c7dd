#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: what CNLab's agent finds there, and a real CUDA job run through it.
# Starts a throwaway server and agent on loopback (nothing is installed or left behind) and prints
# what it found. Later issues add sections (vGPU interception, checkpoint and migration).
#
#   scripts/gpu-check.sh [BUILD_DIR]     (default: build; run `make build` first)
set -uo pipefail

BUILD=${1:-build}
CNLAB="$(cd "$(dirname "$0")/.." && pwd)/$BUILD/cnlab"
[ -x "$CNLAB" ] || { echo "gpu-check: $CNLAB is not built (make build)"; exit 2; }
WORK=$(mktemp -d /tmp/cnlab-gpu-check.XXXXXX)
chmod 0711 "$WORK"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done; wait 2>/dev/null; rm -rf "$WORK"; }
trap cleanup EXIT
section() { printf '\n== %s ==\n' "$1"; }
fail=0

section "driver"
if command -v nvidia-smi >/dev/null; then
  nvidia-smi --query-gpu=index,name,uuid,memory.total,mig.mode.current,driver_version --format=csv
else
  echo "nvidia-smi not found (the agent will still try libnvidia-ml.so.1)"
fi

section "control plane"
"$CNLAB" server init --data-dir "$WORK/server" >/dev/null || exit 1
"$CNLAB" server --data-dir "$WORK/server" --listen 127.0.0.1:0 >"$WORK/server.out" 2>"$WORK/server.log" &
PIDS+=($!)
for _ in $(seq 50); do grep -q "listening on" "$WORK/server.out" 2>/dev/null && break; sleep 0.1; done
URL=$(sed -n 's/^listening on //p' "$WORK/server.out")
[ -n "$URL" ] || { echo "server did not start:"; cat "$WORK/server.log"; exit 1; }
export CNLAB_SERVER=$URL CNLAB_CA=$WORK/server/ca.pem CNLAB_TOKEN=$WORK/server/admin.token
echo "server $URL"

section "agent: NVML discovery"
JOIN=$("$CNLAB" admin join-token create | tail -1)
"$CNLAB" agent --data-dir "$WORK/agent" --join-token "$JOIN" --name gpu-check --metrics-listen 127.0.0.1:0 \
  >"$WORK/agent.out" 2>"$WORK/agent.log" &
PIDS+=($!)
for _ in $(seq 100); do grep -q "running" "$WORK/agent.out" 2>/dev/null && break; sleep 0.1; done
grep -E "gpu backend|nvml" "$WORK/agent.log" | head -5
curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/nodes/gpu-check" |
  python3 -c 'import json,sys
n=json.load(sys.stdin)["status"]
print("node gpu-check: %d GPUs, simulated=%s" % (len(n.get("gpus",[])), n.get("simulated", False)))
for g in n.get("gpus",[]): print("  gpu%d %s %s %d MiB healthy=%s mig=%s %s" % (g["index"], g["model"], g["uuid"], g["memory_mib"], g["healthy"], g["mig_enabled"], g.get("mig_instances", [])))'
GPUS=$(curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/nodes/gpu-check" |
  python3 -c 'import json,sys; g=json.load(sys.stdin)["status"].get("gpus",[]); print(g[0]["model"] if g else "")')
if [ -z "$GPUS" ]; then echo "FAIL: the agent found no GPU it knows (see $WORK/agent.log)"; cat "$WORK/agent.log"; exit 1; fi

section "a real CUDA job through the agent"
cat >"$WORK/job.json" <<JOB
{"metadata":{"name":"gpu-check"},"spec":{"project":"default","gpu":"$GPUS-25","cpu_milli":1000,"memory_mib":2048,
 "command":["python3","-c","import ctypes, os\nprint('CUDA_VISIBLE_DEVICES', os.environ.get('CUDA_VISIBLE_DEVICES'))\ncuda = ctypes.CDLL('libcuda.so.1')\nassert cuda.cuInit(0) == 0, 'cuInit failed'\nn = ctypes.c_int()\ncuda.cuDeviceGetCount(ctypes.byref(n))\nname = ctypes.create_string_buffer(256)\ncuda.cuDeviceGetName(name, 256, 0)\nfree, total = ctypes.c_size_t(), ctypes.c_size_t()\nctx = ctypes.c_void_p()\nassert cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, 0) == 0, 'no context'\ncuda.cuMemGetInfo_v2(ctypes.byref(free), ctypes.byref(total))\nprint('devices', n.value, name.value.decode(), 'free', free.value >> 20, 'MiB of', total.value >> 20)\nopen(os.environ['CNLAB_ARTIFACTS_DIR'] + '/gpu.txt', 'w').write(name.value.decode())"]}}
JOB
ID=$(curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" -X POST "$URL/v1/jobs" -d @"$WORK/job.json" |
  python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])')
for _ in $(seq 300); do
  PHASE=$(curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$ID" |
    python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["phase"])')
  case "$PHASE" in Succeeded|Failed|Cancelled) break ;; esac
  sleep 0.2
done
echo "job $ID: $PHASE"
curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$ID/logs" |
  python3 -c 'import json,sys
for l in sys.stdin: l=json.loads(l); print("  [%s] %s" % (l["stream"], l["text"]))'
curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$ID/artifacts" |
  python3 -c 'import json,sys; print("  artifacts:", [a["path"] for a in json.load(sys.stdin)["items"]])'
[ "$PHASE" = "Succeeded" ] || fail=1

section "agent metrics"
MURL=$(sed -n 's/.*metrics on //p' "$WORK/agent.out")
[ -n "$MURL" ] && curl -s "$MURL/metrics" | grep -E "^cnlab_agent_gpu_(info|healthy|memory_used_bytes|utilization_ratio)" | head -12

section "result"
if [ $fail -eq 0 ]; then echo "gpu-check: OK"; else echo "gpu-check: FAILED (logs in $WORK are removed on exit; rerun with the trap removed to keep them)"; fi
exit $fail

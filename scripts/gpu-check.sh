#!/usr/bin/env bash
# On a machine with an NVIDIA GPU: what CNLab's agent finds there, and a real CUDA job run through it.
# Starts a throwaway server and agent on loopback (nothing is installed or left behind) and prints
# what it found. Then the vGPU interception library on its own (no agent), as jobs would load it:
# quotas as CUDA, PyTorch and NVML see them, allocations past a quota, two tenants on one GPU, CUDA
# IPC refused across tenants, and the compute split of two busy tenants (30 and 70 percent), on
# their own and as two jobs of the agent. The PyTorch checks run where python3 can import torch with CUDA; the
# driver API and IPC checks need only ctypes. Last, a CUDA process checkpointed with cuda-checkpoint
# and CRIU, restored from a copy of its images and checked to carry on, and a CUDA job checkpointed,
# pre-empted and resumed through the agent with its GPU state (where both tools exist).
#
#   scripts/gpu-check.sh [BUILD_DIR]     (default: build; run `make build` first)
#
# GPU_CHECK_KEEP=FILE.tgz keeps its logs (the server's, the agents', CRIU's; not the memory images)
# in that archive; otherwise they go with the throwaway directory. On a machine without this
# build's packages, run it on scripts/gpu-bundle.sh's archive.
set -uo pipefail

BUILD=${1:-build}
CNLAB="$(cd "$(dirname "$0")/.." && pwd)/$BUILD/cnlab"
[ -x "$CNLAB" ] || { echo "gpu-check: $CNLAB is not built (make build)"; exit 2; }
WORK=$(mktemp -d /tmp/cnlab-gpu-check.XXXXXX)
chmod 0711 "$WORK"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
  wait 2>/dev/null
  [ -n "${GPU_CHECK_KEEP:-}" ] && tar -czf "$GPU_CHECK_KEEP" --exclude='*.img' --exclude='*.tar*' -C "$WORK" . 2>/dev/null
  rm -rf "$WORK"
}
trap cleanup EXIT
trap "exit 143" TERM INT
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
AGENT_PID=$!
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

section "vGPU interception (libcnlab-vgpu.so)"
# Standalone (no agent): each tenant's quota and share come from the environment, and the tenants'
# regions live in $WORK/vgpu. Every program below is one subcommand of $WORK/vgpu_check.py; it prints
# PASS:/FAIL: lines and exits 3 when one of its checks failed.
VGPU_LIB="$(dirname "$CNLAB")/libcnlab-vgpu.so"
# vgpu TENANT NAME SUBCOMMAND ARGS...: a python3 process of TENANT (quota 2 GiB) under the library,
# logging to $WORK/vgpu-NAME.log. Callers add CNLAB_VGPU_* settings as assignments before it.
vgpu() {
  local tenant=$1 name=$2
  shift 2
  timeout 150 env LD_PRELOAD="$VGPU_LIB" CNLAB_VGPU_MEMORY_LIMIT=2Gi CNLAB_VGPU_TENANT="$tenant" \
    CNLAB_VGPU_DIR="$WORK/vgpu" CNLAB_VGPU_LOG=info CNLAB_VGPU_LOG_FILE="$WORK/vgpu-$name.log" \
    python3 "$WORK/vgpu_check.py" "$@"
}
# vgpu_check TENANT NAME SUBCOMMAND ARGS...: vgpu, and the section fails when the program does.
vgpu_check() {
  vgpu "$@"
  local rc=$?
  [ $rc -eq 0 ] && return 0
  if [ $rc -ne 3 ]; then
    echo "FAIL: vgpu_check.py $3 (tenant $1) exited with status $rc; its vGPU log:"
    tail -5 "$WORK/vgpu-$2.log" 2>/dev/null
  fi
  fail=1
  return 1
}
# wait_file FILE PID SECONDS: until FILE is there and not empty, PID has exited, or SECONDS passed.
wait_file() {
  for _ in $(seq $(($3 * 10))); do
    [ -s "$1" ] && return 0
    kill -0 "$2" 2>/dev/null || break
    sleep 0.1
  done
  [ -s "$1" ]
}

if [ ! -f "$VGPU_LIB" ]; then
  echo "FAIL: $VGPU_LIB is not built (cmake --build $BUILD --target cnlab-vgpu)"
  fail=1
else
  cat >"$WORK/vgpu_check.py" <<'PY'
import ctypes, glob, os, sys, time
from ctypes import byref, c_char, c_char_p, c_int, c_size_t, c_uint, c_ulonglong, c_void_p

MiB, GiB = 1 << 20, 1 << 30
QUOTA = 2 * GiB  # CNLAB_VGPU_MEMORY_LIMIT=2Gi
SLACK = 64 * MiB
TENANT = os.environ.get('CNLAB_VGPU_TENANT', '?')
failed = False


def PASS(what):
    print('PASS: ' + what, flush=True)


def FAIL(what):
    global failed
    failed = True
    print('FAIL: ' + what, flush=True)


def check(ok, passed, otherwise):
    PASS(passed) if ok else FAIL(otherwise)


def wait_for(path, seconds):
    deadline = time.time() + seconds
    while not os.path.exists(path) and time.time() < deadline:
        time.sleep(0.05)


def write_atomically(path, data):
    with open(path + '.tmp', 'wb') as f:
        f.write(data)
    os.rename(path + '.tmp', path)


# ---- The driver API through ctypes (no PyTorch, no runtime) ----
class Driver:
    def __init__(self):
        self.cu = ctypes.CDLL('libcuda.so.1')
        self.call('cuInit', c_uint(0))
        self.dev = c_int()
        self.call('cuDeviceGet', byref(self.dev), c_int(0))
        self.ctx = c_void_p()
        self.call('cuDevicePrimaryCtxRetain', byref(self.ctx), self.dev)
        self.call('cuCtxSetCurrent', self.ctx)

    def call(self, name, *args):
        r = getattr(self.cu, name)(*args)
        if r != 0:
            raise RuntimeError('%s returned %s' % (name, self.error(r)))

    def error(self, r):
        name = c_char_p()
        self.cu.cuGetErrorName(c_int(r), byref(name))
        return '%d (%s)' % (r, name.value.decode() if name.value else '?')

    def mem_info(self):
        free, total = c_size_t(), c_size_t()
        self.call('cuMemGetInfo_v2', byref(free), byref(total))
        return free.value, total.value

    def alloc(self, size):
        p = c_ulonglong()
        return self.cu.cuMemAlloc_v2(byref(p), c_size_t(size)), p

    def free(self, p):
        self.call('cuMemFree_v2', p)


def cuda_uuid():
    """CUDA device 0's UUID as NVML writes it (GPU-8-4-4-4-12 hex digits), or None."""
    try:
        cu = ctypes.CDLL('libcuda.so.1')
        dev, raw = c_int(), (c_char * 16)()
        if cu.cuInit(c_uint(0)) or cu.cuDeviceGet(byref(dev), c_int(0)):
            return None
        get = getattr(cu, 'cuDeviceGetUuid_v2', None) or cu.cuDeviceGetUuid
        if get(raw, dev):
            return None
    except (OSError, AttributeError):
        return None
    h = bytes(raw).hex()
    return 'GPU-%s-%s-%s-%s-%s' % (h[0:8], h[8:12], h[12:16], h[16:20], h[20:32])


class NvmlMemory(ctypes.Structure):
    _fields_ = [('total', c_ulonglong), ('free', c_ulonglong), ('used', c_ulonglong)]


def nvml_memory():
    """NVML's (free, total) for CUDA device 0's GPU (matched by UUID; NVML index 0 when none matches)."""
    nvml = ctypes.CDLL('libnvidia-ml.so.1')
    if nvml.nvmlInit_v2():
        raise RuntimeError('nvmlInit_v2 failed')
    want, handle, count = cuda_uuid(), None, c_uint()
    nvml.nvmlDeviceGetCount_v2(byref(count))
    for i in range(count.value):
        h, uuid = c_void_p(), ctypes.create_string_buffer(96)
        if nvml.nvmlDeviceGetHandleByIndex_v2(c_uint(i), byref(h)) == 0 and \
                nvml.nvmlDeviceGetUUID(h, uuid, c_uint(96)) == 0 and uuid.value.decode() == want:
            handle = h
            break
    if handle is None:
        handle = c_void_p()
        if nvml.nvmlDeviceGetHandleByIndex_v2(c_uint(0), byref(handle)):
            raise RuntimeError('nvmlDeviceGetHandleByIndex_v2(0) failed')
    m = NvmlMemory()
    r = nvml.nvmlDeviceGetMemoryInfo(handle, byref(m))
    if r:
        raise RuntimeError('nvmlDeviceGetMemoryInfo returned %d' % r)
    return m.free, m.total


def check_views(api, free, total):
    """The quota as `api` and NVML see it: both totals are the quota, and they agree on free."""
    nfree, ntotal = nvml_memory()
    print('  %s: free %d MiB of %d MiB; nvmlDeviceGetMemoryInfo: free %d MiB of %d MiB'
          % (api, free // MiB, total // MiB, nfree // MiB, ntotal // MiB))
    check(total == QUOTA, '%s reports the 2 GiB quota as the total' % api,
          '%s reports a total of %d bytes, not the quota (%d)' % (api, total, QUOTA))
    check(ntotal == QUOTA, 'nvmlDeviceGetMemoryInfo reports the 2 GiB quota as the total',
          'nvmlDeviceGetMemoryInfo reports a total of %d bytes, not the quota (%d)' % (ntotal, QUOTA))
    check(abs(nfree - free) <= SLACK, '%s and NVML agree on free memory (%+d MiB)' % (api, (nfree - free) // MiB),
          '%s says %d MiB free, NVML %d MiB (more than 64 MiB apart)' % (api, free // MiB, nfree // MiB))


def driver_quota():
    d = Driver()
    free, total = d.mem_info()
    check_views('cuMemGetInfo_v2', free, total)
    r, a = d.alloc(3 * GiB // 2)
    check(r == 0, 'cuMemAlloc_v2 of 1.5 GiB under the 2 GiB quota succeeds',
          'cuMemAlloc_v2 of 1.5 GiB under the 2 GiB quota returned %s' % d.error(r))
    r2, b = d.alloc(GiB)
    check(r2 == 2, 'cuMemAlloc_v2 of 1 GiB more is refused with CUDA_ERROR_OUT_OF_MEMORY',
          'cuMemAlloc_v2 of 1 GiB past the quota returned %s, not 2 (CUDA_ERROR_OUT_OF_MEMORY)' % d.error(r2))
    for ok, p in ((r2, b), (r, a)):
        if ok == 0:
            d.free(p)
    free, _ = d.mem_info()
    check(free >= QUOTA - SLACK, 'after cuMemFree_v2, %d MiB of the quota is free again' % (free // MiB),
          'after cuMemFree_v2 only %d MiB of the 2 GiB quota is free' % (free // MiB))


# ---- PyTorch ----
def torch_oom():
    import torch
    return getattr(torch.cuda, 'OutOfMemoryError', RuntimeError)


def torch_quota():
    import torch
    free, total = torch.cuda.mem_get_info()
    check_views('torch.cuda.mem_get_info()', free, total)


def torch_alloc(mib):
    """A tensor of `mib` MiB, or None when PyTorch raises OutOfMemoryError."""
    import torch
    try:
        return torch.empty(mib * MiB, dtype=torch.uint8, device='cuda')
    except torch_oom() as e:
        print('  (%s: %s)' % (type(e).__name__, str(e).splitlines()[0][:160]))
        return None


def torch_beyond_quota():
    import torch
    held = torch_alloc(1536)
    check(held is not None, 'torch.empty of 1.5 GiB under the 2 GiB quota succeeds',
          'torch.empty of 1.5 GiB under the 2 GiB quota raised OutOfMemoryError')
    more = torch_alloc(1024)
    check(more is None, '1 GiB more raises torch.cuda.OutOfMemoryError',
          'torch.empty of 1 GiB past the quota succeeded')
    del held, more
    torch.cuda.empty_cache()
    free, total = torch.cuda.mem_get_info()
    check(free >= QUOTA - SLACK, 'after del and empty_cache(), mem_get_info() shows %d MiB free' % (free // MiB),
          'after del and empty_cache(), mem_get_info() shows only %d MiB of 2048 free' % (free // MiB))


def torch_hold(mib, ready, release, seconds):
    held = torch_alloc(int(mib))
    if held is None:
        FAIL('tenant %s could not hold %s MiB' % (TENANT, mib))
    else:
        print('  tenant %s holds %s MiB (pid %d)' % (TENANT, mib, os.getpid()), flush=True)
    write_atomically(ready, b'held' if held is not None else b'failed')
    if held is not None:
        wait_for(release, float(seconds))


def torch_expect(mib, expect, what):
    import torch
    held = torch_alloc(int(mib))
    free, total = torch.cuda.mem_get_info()
    got = 'ok' if held is not None else 'oom'
    detail = 'tenant %s: %s (mem_get_info: free %d MiB of %d MiB)' % (TENANT, what, free // MiB, total // MiB)
    check(got == expect, detail, detail + ': ' + ('it raised OutOfMemoryError' if got == 'oom' else 'it succeeded'))


def torch_spin(ready, go, seconds):
    """A tight loop of 4096x4096 float16 matmuls; counts iterations over the second half of `seconds`."""
    import torch
    a = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')
    b = torch.randn(4096, 4096, dtype=torch.float16, device='cuda')
    c = torch.empty_like(a)
    for _ in range(10):
        torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    write_atomically(ready, b'ready')
    wait_for(go, 120)
    seconds = float(seconds)
    start = time.time()
    n, half, n_half, t_half = 0, start + seconds / 2, None, None
    while True:
        for _ in range(4):
            torch.mm(a, b, out=c)
        torch.cuda.synchronize()
        n += 4
        now = time.time()
        if n_half is None and now >= half:
            n_half, t_half = n, now
        if now >= start + seconds:
            break
    last, span = n - n_half, now - t_half
    share = os.environ.get('CNLAB_VGPU_COMPUTE_SHARE', '100')
    print('  tenant %s (share %s%%): %d iterations in the last %.1f s, %.1f it/s' % (TENANT, share, last, span, last / span))
    print('SPIN tenant=%s share=%s iterations=%d seconds=%.3f' % (TENANT, share, last, span), flush=True)


# ---- CUDA IPC: through libcudart where it is found, else through the driver ----
class IpcHandle(ctypes.Structure):
    _fields_ = [('reserved', c_char * 64)]  # cudaIpcMemHandle_t and CUipcMemHandle alike


def cudart_candidates():
    names = ['libcudart.so', 'libcudart.so.13', 'libcudart.so.12', 'libcudart.so.11.0']
    for pattern in ['/usr/local/cuda/lib64/libcudart.so*', '/usr/local/cuda-*/lib64/libcudart.so*']:
        names += sorted(glob.glob(pattern))
    for path in sys.path:  # pip wheels: nvidia-cuda-runtime, or PyTorch's own copy
        names += sorted(glob.glob(os.path.join(path, 'nvidia', 'cuda_runtime', 'lib', 'libcudart.so*')))
        names += sorted(glob.glob(os.path.join(path, 'torch', 'lib', 'libcudart*.so*')))
    seen = set()
    for name in names:
        try:
            rt = ctypes.CDLL(name)
        except OSError:
            continue
        if rt._handle not in seen:
            seen.add(rt._handle)
            yield rt, name


class RuntimeIpc:
    def __init__(self, rt):
        self.rt = rt
        rt.cudaGetErrorName.restype = c_char_p
        rt.cudaIpcOpenMemHandle.argtypes = [ctypes.POINTER(c_void_p), IpcHandle, c_uint]
        for call in (lambda: rt.cudaSetDevice(c_int(0)), lambda: rt.cudaFree(c_void_p(0))):
            r = call()
            if r:
                raise RuntimeError('the runtime did not start: %s' % self.error(r))

    def error(self, r):
        return '%d (%s)' % (r, (self.rt.cudaGetErrorName(c_int(r)) or b'?').decode())

    def export(self):
        p, h = c_void_p(), IpcHandle()
        r = self.rt.cudaMalloc(byref(p), c_size_t(64 * MiB)) or self.rt.cudaIpcGetMemHandle(byref(h), p)
        if r:
            raise RuntimeError('cudaMalloc + cudaIpcGetMemHandle: %s' % self.error(r))
        self.kept = p
        return ctypes.string_at(ctypes.addressof(h), 64)

    def open(self, data):
        p = c_void_p()
        r = self.rt.cudaIpcOpenMemHandle(byref(p), IpcHandle.from_buffer_copy(data), c_uint(1))
        if r == 0:
            self.rt.cudaIpcCloseMemHandle(p)
        return r


class DriverIpc:
    def __init__(self):
        self.d = Driver()
        self.d.cu.cuIpcOpenMemHandle_v2.argtypes = [ctypes.POINTER(c_ulonglong), IpcHandle, c_uint]

    def error(self, r):
        return self.d.error(r)

    def export(self):
        r, p = self.d.alloc(64 * MiB)
        h = IpcHandle()
        r = r or self.d.cu.cuIpcGetMemHandle(byref(h), p)
        if r:
            raise RuntimeError('cuMemAlloc_v2 + cuIpcGetMemHandle: %s' % self.error(r))
        self.kept = p
        return ctypes.string_at(ctypes.addressof(h), 64)

    def open(self, data):
        p = c_ulonglong()
        r = self.d.cu.cuIpcOpenMemHandle_v2(byref(p), IpcHandle.from_buffer_copy(data), c_uint(1))
        if r == 0:
            self.d.cu.cuIpcCloseMemHandle(p)
        return r


def ipc():
    """The first CUDA runtime that starts here, else the driver API."""
    for rt, name in cudart_candidates():
        try:
            api = RuntimeIpc(rt)
            print('  tenant %s: through the CUDA runtime %s' % (TENANT, name))
            return api
        except RuntimeError as e:
            print('  tenant %s: %s: %s' % (TENANT, name, e))
    print('  tenant %s: through the driver API (no CUDA runtime starts here)' % TENANT)
    return DriverIpc()


def ipc_export(handle_file, release, seconds):
    api = ipc()
    write_atomically(handle_file, api.export())
    print('  tenant %s exported a CUDA IPC handle of 64 MiB (pid %d)' % (TENANT, os.getpid()), flush=True)
    wait_for(release, float(seconds))


def ipc_open(handle_file, expect, exporter):
    api = ipc()
    with open(handle_file, 'rb') as f:
        r = api.open(f.read())
    what = 'tenant %s opening the handle tenant %s exported' % (TENANT, exporter)
    if expect == 'ok':
        check(r == 0, what + ' succeeds', what + ' failed with %s' % api.error(r))
        return
    check(r != 0, what + ' is refused with %s' % api.error(r), what + ' succeeded')
    log_file = os.environ.get('CNLAB_VGPU_LOG_FILE', '')
    lines = [l.rstrip() for l in open(log_file, errors='replace')] if os.path.exists(log_file) else []
    refusals = [l for l in lines if 'refused cuIpcOpenMemHandle' in l]
    check(refusals, 'the vGPU log says so: ' + (refusals[0] if refusals else ''),
          'the vGPU log (%s) has no "refused cuIpcOpenMemHandle" line' % log_file)


if __name__ == '__main__':
    commands = {'driver': driver_quota, 'quota': torch_quota, 'oom': torch_beyond_quota, 'hold': torch_hold,
                'expect': torch_expect, 'spin': torch_spin, 'ipc-export': ipc_export, 'ipc-open': ipc_open}
    commands[sys.argv[1]](*sys.argv[2:])
    sys.exit(3 if failed else 0)
PY
  echo "library $VGPU_LIB; tenant regions in $WORK/vgpu; each tenant's quota 2 GiB"
  HAVE_TORCH=0
  if python3 -c 'import sys, torch; sys.exit(0 if torch.cuda.is_available() else 1)' 2>/dev/null; then
    HAVE_TORCH=1
    echo "PyTorch $(python3 -c 'import torch; print(torch.__version__, "CUDA", torch.version.cuda)' 2>/dev/null)"
  else
    echo "python3 cannot import torch with CUDA available: skipping the PyTorch checks (quota, OOM, two" \
      "tenants, compute split); the driver API and IPC checks below need only ctypes"
  fi

  echo "-- the quota through the driver API (ctypes on libcuda.so.1, as the job above)"
  vgpu_check check-drv driver driver

  if [ $HAVE_TORCH -eq 1 ]; then
    echo "-- the quota as PyTorch and NVML see it"
    vgpu_check check-a quota quota
    echo "-- allocations beyond the quota"
    vgpu_check check-a oom oom

    echo "-- two tenants on one GPU"
    rm -f "$WORK/hold.ready" "$WORK/hold.release"
    vgpu check-a hold hold 1536 "$WORK/hold.ready" "$WORK/hold.release" 120 &
    HOLD=$!
    PIDS+=("$HOLD")
    if wait_file "$WORK/hold.ready" $HOLD 90 && [ "$(cat "$WORK/hold.ready")" = held ]; then
      vgpu_check check-b expect-b expect 1536 ok "allocates 1.5 GiB while tenant check-a holds 1.5 GiB"
      vgpu_check check-a expect-a expect 1024 oom \
        "a second process cannot allocate 1 GiB while another of its tenant holds 1.5 GiB of the 2"
    else
      echo "FAIL: tenant check-a did not come to hold 1.5 GiB (log: $(tail -3 "$WORK/vgpu-hold.log" 2>/dev/null))"
      fail=1
    fi
    touch "$WORK/hold.release"
    wait $HOLD || fail=1
  fi

  echo "-- CUDA IPC across tenants"
  rm -f "$WORK/ipc.handle" "$WORK/ipc.release"
  vgpu check-a ipc-export ipc-export "$WORK/ipc.handle" "$WORK/ipc.release" 120 &
  EXPORTER=$!
  PIDS+=("$EXPORTER")
  if wait_file "$WORK/ipc.handle" $EXPORTER 90; then
    vgpu_check check-b ipc-open-b ipc-open "$WORK/ipc.handle" refused check-a
    vgpu_check check-a ipc-open-a ipc-open "$WORK/ipc.handle" ok check-a
  else
    echo "FAIL: tenant check-a exported no CUDA IPC handle (log: $(tail -3 "$WORK/vgpu-ipc-export.log" 2>/dev/null))"
    fail=1
  fi
  touch "$WORK/ipc.release"
  wait $EXPORTER || fail=1

  if [ $HAVE_TORCH -eq 1 ]; then
    echo "-- the compute split of two busy tenants, shares 30 and 70"
    rm -f "$WORK"/spin-*.ready "$WORK/spin.go"
    CNLAB_VGPU_COMPUTE_SHARE=30 vgpu check-s30 spin-30 spin "$WORK/spin-30.ready" "$WORK/spin.go" 20 >"$WORK/spin-30.out" &
    S30=$!
    CNLAB_VGPU_COMPUTE_SHARE=70 vgpu check-s70 spin-70 spin "$WORK/spin-70.ready" "$WORK/spin.go" 20 >"$WORK/spin-70.out" &
    S70=$!
    PIDS+=("$S30" "$S70")
    wait_file "$WORK/spin-30.ready" $S30 90 && wait_file "$WORK/spin-70.ready" $S70 90
    touch "$WORK/spin.go"
    wait $S30
    wait $S70
    grep -v '^SPIN ' "$WORK/spin-30.out" "$WORK/spin-70.out" | sed 's/^[^:]*://'
    python3 - "$WORK/spin-30.out" "$WORK/spin-70.out" <<'PY' || fail=1
import sys
runs = {}
for path in sys.argv[1:]:
    for line in open(path):
        if line.startswith('SPIN '):
            f = dict(kv.split('=', 1) for kv in line.split()[1:])
            runs[int(f['share'])] = int(f['iterations'])
if set(runs) != {30, 70} or not runs[30] + runs[70]:
    print('FAIL: the compute split was not measured (a tenant did not finish its loop)')
    sys.exit(1)
total = runs[30] + runs[70]
low, high = 100.0 * runs[30] / total, 100.0 * runs[70] / total
print('  shares of the iterations: tenant check-s30 %.1f%%, tenant check-s70 %.1f%%; ratio %.2f (70/30 = 2.33)'
      % (low, high, runs[70] / max(runs[30], 1)))
if abs(low - 30) <= 5:
    print('PASS: the 30%% tenant got %.1f%% of the iterations (within 5 points of 30%%)' % low)
else:
    print('FAIL: the 30%% tenant got %.1f%% of the iterations (not within 5 points of 30%%)' % low)
    sys.exit(1)
PY
  fi
fi

section "the compute split of two jobs through the agent (h-30 and h-70 on one GPU)"
# Two jobs of one GPU's 30 and 70 blocks, each a tight loop of float16 matmuls for 30 s that prints
# its iterations per wall-clock second; the agent's controller paces their launches. Counted over
# the seconds both ran, after 10 s to settle: the 30-block job must get 30% of the iterations
# (within 5 points). Needs python3 with PyTorch on CUDA (the jobs run it by its absolute path, as
# the agent gives jobs a plain PATH).
TORCH_PY=$(command -v python3)
if [ "${HAVE_TORCH:-0}" -ne 1 ]; then
  echo "SKIP: python3 cannot import torch with CUDA available; not counted"
else
  cat >"$WORK/split_job.py" <<'PY'
import time, torch
a = torch.randn(4096, 4096, dtype=torch.float16, device='cuda'); b = torch.randn_like(a); c = torch.empty_like(a)
for _ in range(10): torch.mm(a, b, out=c)
torch.cuda.synchronize()
end, second, n = time.time() + 30, int(time.time()), 0
while time.time() < end:
    for _ in range(4): torch.mm(a, b, out=c)
    torch.cuda.synchronize()
    n += 4
    if int(time.time()) != second:
        print('T', second, n, flush=True)
        second, n = int(time.time()), 0
PY
  split_job() {  # split_job NAME BLOCKS: submits it, prints its id
    python3 - "$WORK/split_job.py" "$TORCH_PY" "$GPUS-$2" "$1" <<'PY' | curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" -X POST "$URL/v1/jobs" -d @- |
import json, sys
print(json.dumps({"metadata": {"name": sys.argv[4]}, "spec": {"project": "default", "gpu": sys.argv[3],
    "cpu_milli": 1000, "memory_mib": 8192, "command": [sys.argv[2], "-u", "-c", open(sys.argv[1]).read()]}}))
PY
      python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])'
  }
  S30=$(split_job split-30 30)
  S70=$(split_job split-70 70)
  for _ in $(seq 600); do
    P30=$(curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$S30" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["phase"])')
    P70=$(curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$S70" | python3 -c 'import json,sys; print(json.load(sys.stdin)["status"]["phase"])')
    case "$P30$P70" in *Pending*|*Scheduled*|*Running*) sleep 0.5 ;; *) break ;; esac
  done
  echo "jobs $S30: $P30, $S70: $P70"
  for j in "$S30" "$S70"; do
    curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$URL/v1/jobs/$j/logs" >"$WORK/$j.logs"
  done
  python3 - "$WORK/$S30.logs" "$WORK/$S70.logs" <<'PY' || fail=1
import json, sys
def per_second(path):
    out = {}
    for line in open(path):
        text = json.loads(line)["text"].split()
        if len(text) == 3 and text[0] == 'T': out[int(text[1])] = int(text[2])
    return out
low, high = per_second(sys.argv[1]), per_second(sys.argv[2])
common = sorted(set(low) & set(high))[10:]
if len(common) < 5:
    print('FAIL: the two jobs ran together for too few seconds to measure (%d after settling)' % len(common)); sys.exit(1)
a, b = sum(low[s] for s in common), sum(high[s] for s in common)
share = 100.0 * a / max(a + b, 1)
print('  over %d s: the 30-block job %d iterations, the 70-block job %d; the 30-block job got %.1f%%' % (len(common), a, b, share))
ok = abs(share - 30) <= 5
print(('PASS' if ok else 'FAIL') + ': the 30-block job got %.1f%% of the iterations (30 +- 5)' % share)
sys.exit(0 if ok else 1)
PY
  grep -E "vgpu|share" "$WORK/agent.log" | grep -v "gpu found" | tail -n 3
fi

section "checkpoint and migration of a CUDA process (cuda-checkpoint + CRIU)"
# A CUDA process (driver API through ctypes) keeps a counter in device memory and checks it every
# step; it is suspended by NVIDIA's cuda-checkpoint (device memory and contexts into host memory),
# dumped by CRIU, restored from a copy of the images (as on another node with the same GPU model)
# and resumed, and must carry on from the same count with its device memory intact. Needs root, a
# CRIU whose `criu check` passes and cuda-checkpoint (NVIDIA's, driver r550+, or CNLab's
# cnlab-cuda-checkpoint beside cnlab, driver r570+); without them the section says
# why and is not counted: CNLab then moves GPU jobs through their application checkpoints.
CRIU=$(command -v criu || ls /usr/local/sbin/criu 2>/dev/null || true)
# NVIDIA's utility where it is installed, else CNLab's own on the driver's checkpoint API (r570+).
CUDA_CKPT=$(command -v cuda-checkpoint || true)
[ -z "$CUDA_CKPT" ] && [ -x "$(dirname "$CNLAB")/cnlab-cuda-checkpoint" ] && CUDA_CKPT="$(dirname "$CNLAB")/cnlab-cuda-checkpoint"
echo "cuda-checkpoint: ${CUDA_CKPT:-none}"
if [ "$(id -u)" -ne 0 ] || [ -z "$CRIU" ] || [ -z "$CUDA_CKPT" ]; then
  echo "SKIP: needs root, criu and cuda-checkpoint (root=$(id -u) criu=${CRIU:-none} cuda-checkpoint=${CUDA_CKPT:-none}); not counted"
else
  cat > "$WORK/cuda_counter.py" <<'PY'
import ctypes, sys, time
cuda = ctypes.CDLL('libcuda.so.1')
def ok(rc, what):
    if rc != 0: print('FAIL:', what, rc, flush=True); sys.exit(3)
ok(cuda.cuInit(0), 'cuInit')
dev = ctypes.c_int(); ok(cuda.cuDeviceGet(ctypes.byref(dev), 0), 'cuDeviceGet')
ctx = ctypes.c_void_p(); ok(cuda.cuCtxCreate_v2(ctypes.byref(ctx), 0, dev), 'cuCtxCreate')
n = 64 << 20
ptr = ctypes.c_uint64(); ok(cuda.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(n)), 'cuMemAlloc')
host = (ctypes.c_uint32 * (n // 4))()
back = (ctypes.c_uint32 * (n // 4))()
step = 0
while True:
    host[0] = step; host[n // 4 - 1] = step
    ok(cuda.cuMemcpyHtoD_v2(ptr, host, ctypes.c_size_t(n)), 'cuMemcpyHtoD')
    ok(cuda.cuMemcpyDtoH_v2(back, ptr, ctypes.c_size_t(n)), 'cuMemcpyDtoH')
    if back[0] != step or back[n // 4 - 1] != step: print('FAIL: device memory lost at step', step, flush=True); sys.exit(3)
    print('step', step, flush=True)
    step += 1
    time.sleep(0.1)
PY
  # In the machine's own namespaces, as NVIDIA's own example runs it (a process in a PID namespace
  # of its own needs its own /proc for cuInit, and so a mount namespace, which the agent's jobs
  # have: the next section). CRIU restores it with its PID, which its end left free.
  setsid python3 "$WORK/cuda_counter.py" > "$WORK/cuda-counter.out" 2>&1 < /dev/null &
  CPID=$!; PIDS+=("$CPID")
  sleep 3
  BEFORE=$(grep -c '^step' "$WORK/cuda-counter.out")
  if [ -z "$CPID" ] || [ "$BEFORE" -lt 1 ]; then
    echo "FAIL: the CUDA process did not start: $(tail -n 3 "$WORK/cuda-counter.out")"; fail=1
  else
    mkdir -p "$WORK/ckpt"
    T0=$(date +%s%N)
    if "$CUDA_CKPT" --toggle --pid "$CPID" && CRIU_FAULT=130 timeout 300 "$CRIU" dump --tree "$CPID" \
         --images-dir "$WORK/ckpt" --log-file dump.log --shell-job; then
      T1=$(date +%s%N)
      cp -a "$WORK/ckpt" "$WORK/ckpt-copy"   # "another node": a copy of the images
      LAST=$(grep '^step' "$WORK/cuda-counter.out" | tail -n 1 | awk '{print $2}')
      if CRIU_FAULT=130 timeout 300 "$CRIU" restore --images-dir "$WORK/ckpt-copy" --log-file restore.log \
           --shell-job --restore-detached --pidfile "$WORK/restored.pid"; then
        RPID=$(cat "$WORK/restored.pid"); PIDS+=("$RPID")
        "$CUDA_CKPT" --toggle --pid "$RPID"
        T2=$(date +%s%N)
        sleep 2
        AFTER=$(grep '^step' "$WORK/cuda-counter.out" | awk -v last="$LAST" '$2 > last' | wc -l)
        NEXT=$(grep '^step' "$WORK/cuda-counter.out" | awk -v last="$LAST" '$2 > last {print $2; exit}')
        echo "  dump ${BEFORE}+ steps in: $(( (T1 - T0) / 1000000 )) ms (toggle + dump); restore + toggle: $(( (T2 - T1) / 1000000 )) ms"
        if [ "$AFTER" -ge 5 ] && [ "$NEXT" = "$((LAST + 1))" ] && ! grep -q '^FAIL' "$WORK/cuda-counter.out"; then
          echo "PASS: the CUDA process carried on from step $NEXT after its checkpoint, device memory intact"
        else
          echo "FAIL: after the restore: next step '${NEXT}' (expected $((LAST + 1))), $AFTER steps; $(grep '^FAIL' "$WORK/cuda-counter.out" | head -n 1)"
          fail=1
        fi
      else
        echo "FAIL: criu restore: $(grep Error "$WORK/ckpt-copy/restore.log" | tail -n 3)"; fail=1
      fi
    else
      echo "FAIL: cuda-checkpoint or criu dump: $(grep Error "$WORK/ckpt/dump.log" 2>/dev/null | tail -n 3)"; fail=1
    fi
  fi
fi

section "a CUDA job checkpointed, resumed and live-migrated through the agents (cuda-checkpoint)"
# The agent restarted with --cuda-checkpoint, running jobs with libcnlab-vgpu.so as by default (its
# tenant region moves with the dump: docs/checkpoint.md); a checkpointable job on a whole GPU keeps
# a counter in device memory and checks it every step. `cnlab checkpoint` must take a transparent
# ("process") checkpoint with the job running on; a production job then pre-empts it, and it must
# resume from its dump (same process, next step, device memory intact) once the GPU is free again.
if [ "$(id -u)" -ne 0 ] || [ -z "$CRIU" ] || [ -z "$CUDA_CKPT" ]; then
  echo "SKIP: needs root, criu and cuda-checkpoint (as above); not counted"
else
  api() { curl -s --cacert "$CNLAB_CA" -H "Authorization: Bearer $(cat "$CNLAB_TOKEN")" "$@"; }
  kill "$AGENT_PID"
  sleep 2
  "$CNLAB" agent --data-dir "$WORK/agent" --join-token "$JOIN" --name gpu-check --address 127.0.0.1 \
    --metrics-listen 127.0.0.1:0 --cuda-checkpoint "$CUDA_CKPT" --checkpoint-grace 1s >"$WORK/agent2.out" 2>"$WORK/agent2.log" &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "running" "$WORK/agent2.out" 2>/dev/null && break; sleep 0.1; done
  grep -o "gpu_checkpoint=[a-z]*" "$WORK/agent2.log" | head -1
  python3 - "$WORK/cuda_counter.py" "$GPUS" > "$WORK/ckpt-job.json" <<'PY'
import json, sys
print(json.dumps({"metadata": {"name": "gpu-ckpt"}, "spec": {"project": "default", "gpu": sys.argv[2],
    "cpu_milli": 1000, "memory_mib": 4096, "checkpointable": True, "priority_class": "opportunistic",
    "command": ["python3", "-u", "-c", open(sys.argv[1]).read()]}}))
PY
  CID=$(api -X POST "$URL/v1/jobs" -d @"$WORK/ckpt-job.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])')
  steps() { api "$URL/v1/jobs/$CID/logs" | python3 -c 'import json,sys
print(" ".join(json.loads(l)["text"].split()[1] for l in sys.stdin if json.loads(l)["text"].startswith("step ")))'; }
  status() { api "$URL/v1/jobs/$CID" | python3 -c "import json,sys; s=json.load(sys.stdin)['status']; print($1)"; }
  # Whether the job's steps so far are one run, every step once and in order, past 20.
  unbroken_steps() {
    python3 - "$(steps)" <<'PY'
import sys
steps = [int(s) for s in sys.argv[1].split()]
ok = steps == list(range(len(steps))) and len(steps) > 20
if not ok: print('FAIL: the steps are not one run without a gap or a repeat:', steps[-30:])
sys.exit(0 if ok else 1)
PY
  }
  for _ in $(seq 300); do [ "$(steps | wc -w)" -ge 10 ] && break; sleep 0.2; done
  "$CNLAB" checkpoint "$CID"
  for _ in $(seq 300); do [ "$(status "s.get('checkpoint', {}).get('kind', '')")" = process ] && break; sleep 0.2; done
  KIND=$(status "s.get('checkpoint', {}).get('kind', '')")
  AT=$(steps | wc -w); sleep 2
  if [ "$KIND" = process ] && [ "$(steps | wc -w)" -gt "$AT" ]; then
    echo "PASS: a transparent checkpoint of the CUDA job, which ran on ($(grep -c 'job CUDA state suspended' "$WORK/agent2.log") suspension(s); frozen $(grep -o 'pause_ms=[0-9]*' "$WORK/agent2.log" | head -1))"
  else
    echo "FAIL: checkpoint kind '${KIND}' (expected process), steps $AT then $(steps | wc -w); $(grep -E 'CUDA|checkpoint' "$WORK/agent2.log" | tail -n 3)"; fail=1
  fi
  # Every GPU of the node, so that it must pre-empt the counter.
  NGPU=$(api "$URL/v1/nodes/gpu-check" | python3 -c 'import json,sys; print(len(json.load(sys.stdin)["status"].get("gpus",[])))')
  cat > "$WORK/urgent.json" <<JOB
{"metadata":{"name":"urgent"},"spec":{"project":"default","gpu":"${GPUS}x${NGPU}","cpu_milli":1000,"memory_mib":256,
 "priority_class":"production","command":["sleep","3"]}}
JOB
  UID_=$(api -X POST "$URL/v1/jobs" -d @"$WORK/urgent.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])')
  for _ in $(seq 600); do
    EV=$(status "' '.join(e.get('reason', '') for e in s.get('events', []))")
    case "$EV" in *"processes restored"*) break ;; esac
    sleep 0.2
  done
  sleep 3
  if echo "$EV" | grep -q "processes restored" && ! api "$URL/v1/jobs/$CID/logs" | grep -q '"FAIL'; then
    unbroken_steps && echo "PASS: pre-empted, dumped with its GPU state and resumed: every step once, device memory intact" || fail=1
  else
    echo "FAIL: not resumed from its dump: $(echo "$EV" | tail -c 300); $(api "$URL/v1/jobs/$CID/logs" | grep FAIL | head -n 1)"; fail=1
  fi
  api -X POST "$URL/v1/jobs/$CID/cancel" >/dev/null; api -X POST "$URL/v1/jobs/$UID_/cancel" >/dev/null

  # Live migration between two agents on this machine (two nodes sharing its GPUs, which the job
  # releases while it is suspended): the job must carry on on the other node, every step once,
  # device memory intact.
  "$CNLAB" agent --data-dir "$WORK/agent-b" --join-token "$("$CNLAB" admin join-token create | tail -1)" \
    --name gpu-check-b --address 127.0.0.1 --metrics-listen 127.0.0.1:0 --cuda-checkpoint "$CUDA_CKPT" >"$WORK/agent-b.out" 2>"$WORK/agent-b.log" &
  PIDS+=($!)
  for _ in $(seq 100); do grep -q "running" "$WORK/agent-b.out" 2>/dev/null && break; sleep 0.1; done
  sleep 2   # its peer endpoint reaches the server with its first heartbeat
  api -X POST "$URL/v1/nodes/gpu-check-b/cordon" >/dev/null   # the job starts on gpu-check
  sed 's/"gpu-ckpt"/"gpu-move"/' "$WORK/ckpt-job.json" > "$WORK/move-job.json"
  CID=$(api -X POST "$URL/v1/jobs" -d @"$WORK/move-job.json" | python3 -c 'import json,sys; print(json.load(sys.stdin)["metadata"]["name"])')
  for _ in $(seq 300); do [ "$(steps | wc -w)" -ge 10 ] && break; sleep 0.2; done
  api -X POST "$URL/v1/nodes/gpu-check-b/uncordon" >/dev/null
  if "$CNLAB" migrate "$CID" --to gpu-check-b; then
    sleep 3
    NODE=$(status "s['placement'][0]['node']")
    PAUSE=$(status "' '.join(e.get('reason', '') for e in s.get('events', []) if e.get('type') == 'Migrated')")
    if [ "$NODE" = gpu-check-b ] && ! api "$URL/v1/jobs/$CID/logs" | grep -q '"FAIL'; then
      unbroken_steps && echo "PASS: live-migrated with its GPU state ($PAUSE)" || fail=1
    else
      echo "FAIL: after the move it runs on '${NODE}'; $(api "$URL/v1/jobs/$CID/logs" | grep FAIL | head -n 1)"; fail=1
    fi
  else
    echo "FAIL: cnlab migrate: $(tail -n 3 "$WORK/agent2.log" "$WORK/agent-b.log")"; fail=1
  fi
  api -X POST "$URL/v1/jobs/$CID/cancel" >/dev/null
fi

section "result"
if [ $fail -eq 0 ]; then echo "gpu-check: OK"; else echo "gpu-check: FAILED (rerun with GPU_CHECK_KEEP=logs.tgz to keep the logs)"; fi
exit $fail

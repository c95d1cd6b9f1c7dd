#!/usr/bin/env python3
"""A small, real training job for `cnlab run examples/train.py --gpu h100-25`.

Fits y = 3x - 2 by gradient descent on synthetic data, prints its progress, and writes its results
into $CNLAB_ARTIFACTS_DIR (the agent uploads them; `cnlab run` downloads them). It uses the GPU
through PyTorch or, without PyTorch, the CUDA driver directly, when there is one, and says so when
there is not (a simulated GPU has no CUDA). On SIGUSR1 (a pre-emption of a --checkpointable job)
it saves its state into $CNLAB_CHECKPOINT_DIR and resumes from it on the next start.

  python3 examples/train.py --epochs 5 --sleep 0.2
"""
import argparse
import ctypes
import json
import os
import random
import signal
import sys
import time


def describe_cuda():
    """What CUDA this process can use, in words, and a real allocation on the GPU when there is one."""
    visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
    try:
        import torch  # noqa: F401

        if torch.cuda.is_available():
            x = torch.randn(1024, 1024, device="cuda")
            checksum = float((x @ x).sum())
            return f"CUDA through PyTorch on {torch.cuda.get_device_name(0)} (matmul checksum {checksum:.1f})"
    except ImportError:
        pass
    try:
        cuda = ctypes.CDLL("libcuda.so.1")
    except OSError:
        return f"no CUDA here (no libcuda.so.1; CUDA_VISIBLE_DEVICES={visible or 'unset'}): training on the CPU"
    count = ctypes.c_int(0)
    if cuda.cuInit(0) != 0 or cuda.cuDeviceGetCount(ctypes.byref(count)) != 0 or count.value == 0:
        return f"no usable CUDA device (CUDA_VISIBLE_DEVICES={visible or 'unset'}): training on the CPU"
    device, context, pointer = ctypes.c_int(0), ctypes.c_void_p(), ctypes.c_uint64(0)
    name = ctypes.create_string_buffer(128)
    cuda.cuDeviceGet(ctypes.byref(device), 0)
    cuda.cuDeviceGetName(name, 128, device)
    if cuda.cuCtxCreate_v2(ctypes.byref(context), 0, device) != 0:
        return f"CUDA device {name.value.decode()} present but no context could be created: training on the CPU"
    allocated = cuda.cuMemAlloc_v2(ctypes.byref(pointer), ctypes.c_size_t(64 << 20)) == 0
    if allocated:
        cuda.cuMemsetD8_v2(pointer, 1, ctypes.c_size_t(64 << 20))
        cuda.cuMemFree_v2(pointer)
    cuda.cuCtxDestroy_v2(context)
    return f"CUDA driver on {name.value.decode()} (64 MiB allocated and written: {'yes' if allocated else 'no'})"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--sleep", type=float, default=0.2, help="seconds of pretend work per epoch")
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()

    artifacts = os.environ.get("CNLAB_ARTIFACTS_DIR", "artifacts")
    checkpoint_dir = os.environ.get("CNLAB_CHECKPOINT_DIR", "")
    os.makedirs(artifacts, exist_ok=True)
    print(f"job {os.environ.get('CNLAB_JOB_ID', '(not under cnlab)')}: {describe_cuda()}", flush=True)

    rng = random.Random(42)
    data = [(x, 3.0 * x - 2.0 + rng.gauss(0, 0.1)) for x in (rng.uniform(-1, 1) for _ in range(args.samples))]
    state = {"epoch": 0, "w": 0.0, "b": 0.0}
    checkpoint = os.path.join(checkpoint_dir, "state.json") if checkpoint_dir else ""
    if checkpoint and os.path.exists(checkpoint):
        with open(checkpoint) as f:
            state = json.load(f)
        print(f"resuming from the checkpoint of epoch {state['epoch']}", flush=True)

    def save_checkpoint(signum, frame):
        if checkpoint:
            with open(checkpoint + ".tmp", "w") as f:
                json.dump(state, f)
            os.replace(checkpoint + ".tmp", checkpoint)
            print(f"checkpoint saved at epoch {state['epoch']}", flush=True)

    signal.signal(signal.SIGUSR1, save_checkpoint)

    rows = ["epoch,loss,w,b"]
    started = time.time()
    while state["epoch"] < args.epochs:
        grad_w = grad_b = loss = 0.0
        for x, y in data:
            error = state["w"] * x + state["b"] - y
            loss += error * error
            grad_w += 2 * error * x
            grad_b += 2 * error
        n = len(data)
        state["w"] -= 0.5 * grad_w / n
        state["b"] -= 0.5 * grad_b / n
        state["epoch"] += 1
        rows.append(f"{state['epoch']},{loss / n:.6f},{state['w']:.4f},{state['b']:.4f}")
        print(f"epoch {state['epoch']}/{args.epochs} loss {loss / n:.4f} w {state['w']:.3f} b {state['b']:.3f}",
              flush=True)
        time.sleep(args.sleep)

    with open(os.path.join(artifacts, "metrics.csv"), "w") as f:
        f.write("\n".join(rows) + "\n")
    with open(os.path.join(artifacts, "model.json"), "w") as f:
        json.dump({"w": state["w"], "b": state["b"], "epochs": state["epoch"]}, f)
    print(f"done in {time.time() - started:.1f}s: y = {state['w']:.3f}x + {state['b']:.3f}; "
          f"wrote metrics.csv and model.json", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())

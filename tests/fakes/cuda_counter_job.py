# A job for the tests of GPU checkpoints with the cuda-checkpoint TEST DOUBLE
# (fake_cuda_checkpoint.py): it prints "tick N pid P child C alive A" every 100 ms, and before each
# tick makes a "CUDA call", which blocks while the double says its CUDA state is not running, as a
# real process's calls do while it is locked. Its child holds no CUDA context (no
# FAKE_CUDA_CONTEXT in its environment).
import os
import subprocess
import sys
import time

state = f'.fake-cuda-state.{os.getpid()}'
plain = {k: v for k, v in os.environ.items() if not k.startswith('FAKE_CUDA')}
child = subprocess.Popen([sys.executable, '-c', 'import time\nwhile True: time.sleep(0.05)'], env=plain)


def cuda_call():
    while os.path.exists(state) and open(state).read() != 'running':
        time.sleep(0.01)


i = 0
while True:
    cuda_call()
    print(f'tick {i} pid {os.getpid()} child {child.pid} alive {child.poll() is None}', flush=True)
    i += 1
    time.sleep(0.1)

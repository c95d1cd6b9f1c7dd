# A job for the tests of GPU checkpoints with the cuda-checkpoint TEST DOUBLE
# (fake_cuda_checkpoint.py): given FAKE_CUDA_CONTEXT=1 it "creates a context" (the file the double
# looks for, naming the actions FAKE_CUDA_FAIL asks the double to refuse); it prints "tick N pid P
# child C alive A" every 100 ms, and before each tick makes a "CUDA call", which blocks while the
# double says its CUDA state is not running, as a real process's calls do while it is locked. Its
# child holds no CUDA context.
import os
import subprocess
import sys
import time

state = f'.fake-cuda-state.{os.getpid()}'
if os.environ.get('FAKE_CUDA_CONTEXT') == '1':
    with open(f'.fake-cuda-context.{os.getpid()}', 'w') as context:
        context.write(os.environ.get('FAKE_CUDA_FAIL', ''))
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

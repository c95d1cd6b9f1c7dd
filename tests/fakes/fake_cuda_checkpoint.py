#!/usr/bin/python3
# TEST DOUBLE of NVIDIA's cuda-checkpoint utility, for machines without a GPU driver: the command
# line of the real one (r580: --get-state, --action lock|checkpoint|restore|unlock with --timeout
# and --device-map) and its state machine, running -> locked -> checkpointed -> locked -> running,
# for the processes the agent hands it. Nothing here touches a GPU.
#
# A process "holds a CUDA context" when it created `.fake-cuda-context.<its pid in its namespace>`
# in its working directory (cuda_counter_job.py does, given FAKE_CUDA_CONTEXT=1); for any other
# process --get-state fails, as the real utility does for a process without CUDA. Nothing is read
# from the process's memory (/proc/PID/environ is), which a post-copy restore has not pulled yet.
# Its state lives where a real one's lives, with the process: in its working directory (which a
# checkpoint carries with the job), `.fake-cuda-state.<pid>`, absent meaning running. Every action
# is appended to `.fake-cuda-actions` there ("<pid> <action>[ <device map>]"), so a test and the
# job itself can see what was done and when. A job whose CUDA calls would block while it is not
# running waits for that file to say so. An action named in the context file fails, like a driver
# that refuses it.
import os
import sys

TRANSITIONS = {'lock': ('running', 'locked'), 'checkpoint': ('locked', 'checkpointed'),
               'restore': ('checkpointed', 'locked'), 'unlock': ('locked', 'running')}


def fail(text):
    print(text)
    sys.exit(1)


def main(argv):
    options = {}
    i = 0
    while i < len(argv):
        if argv[i] == '--get-state':
            options['get-state'] = True
            i += 1
        elif argv[i] in ('--action', '--pid', '--timeout', '--device-map') and i + 1 < len(argv):
            options[argv[i][2:]] = argv[i + 1]
            i += 2
        else:
            fail('unknown option ' + argv[i])
    pid = options.get('pid')
    if not pid or not pid.isdigit():
        fail('a --pid is required')
    try:
        status = open(f'/proc/{pid}/status').read()
        # Through the link itself, not the path it names: that path is the process's, in its own
        # mount namespace (a job's directories are bound at /run/cnlab/job there).
        cwd = f'/proc/{pid}/cwd'
        os.stat(cwd)
    except OSError as e:
        fail(f'Could not get state of process ID {pid}: "{e.strerror}"')
    nspid = [line.split()[-1] for line in status.splitlines() if line.startswith('NSpid:')][0]
    context = os.path.join(cwd, f'.fake-cuda-context.{nspid}')
    if not os.path.exists(context):
        fail(f'Could not get state of process ID {pid}: "initialization error"')
    refused = open(context).read().split()
    state_file = os.path.join(cwd, f'.fake-cuda-state.{nspid}')
    state = open(state_file).read().strip() if os.path.exists(state_file) else 'running'
    if options.get('get-state'):
        print(state)
        return
    action = options.get('action')
    if action not in TRANSITIONS:
        fail(f'unknown action {action}')
    if action in refused:
        fail(f'Could not {action} process ID {pid}: "operation not supported"')
    before, after = TRANSITIONS[action]
    if state != before:
        fail(f'Could not {action} process ID {pid}: "invalid state" ({state})')
    with open(os.path.join(cwd, '.fake-cuda-actions'), 'a') as log:
        log.write(f'{nspid} {action}' + (f' {options["device-map"]}' if 'device-map' in options else '') + '\n')
    with open(state_file + '.new', 'w') as out:
        out.write(after)
    os.rename(state_file + '.new', state_file)


main(sys.argv[1:])

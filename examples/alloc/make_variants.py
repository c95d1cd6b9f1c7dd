#!/usr/bin/env python3
"""Writes pod lists the allocation experiment has not been tuned on, to check that a policy's
lead is not an artefact of the five published workloads.

Two families, each written as an openb pod list into --out (never into the repository):
  resampled from the published traces, with one kind of pod made more common than in any of them
    (as the FGD repository's cpuXXX / gpushareXX / multigpuXX / gpuspecXX variants are built):
      synth_cpu250       25% of the pods CPU-only (default: 13%)
      synth_gpushare80   80% of the GPU pods share a GPU (default: 44%)
      synth_multigpu35   35% of the GPU pods ask for 2-8 GPUs (multigpu20: 14%)
      synth_gpuspec33    33% of the GPU pods restricted to GPU models (gpuspec10: 10%)
      synth_default_jitter  the default trace with every share moved by -100..+100 milli
  drawn from made-up distributions:
      synth_uniform      shares uniform over 100..950 milli, whole GPUs, 2-4 GPU gangs, CPU-only
      synth_multigpu     20% 8-GPU and 20% 4-GPU gangs beside 1-GPU and quarter/half-GPU pods
      synth_notebooks    70% small notebook shares (100-500 milli)
      synth_cpuheavy     24 cores per GPU and many CPU-only pods: CPU, not GPUs, runs out

Usage: make_variants.py --data ../shared/data/alibaba-openb-2023 --out out/variants [--seed 11]
"""
import argparse
import csv
import os
import random

FIELDS = ['name', 'cpu_milli', 'memory_mib', 'num_gpu', 'gpu_milli', 'gpu_spec', 'qos', 'pod_phase',
          'creation_time', 'deletion_time', 'scheduled_time']


def load(data, workload):
    with open(os.path.join(data, f'openb_pod_list_{workload}.csv'), newline='') as f:
        return list(csv.DictReader(f))


def write(out, name, rows):
    with open(os.path.join(out, name + '.csv'), 'w', newline='') as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        for i, r in enumerate(rows):
            row = {k: r.get(k) or '' for k in FIELDS}
            row['name'] = f'{name}-{i:05d}'
            for k, v in (('qos', 'LS'), ('pod_phase', 'Running'), ('creation_time', '0'),
                         ('deletion_time', '1'), ('scheduled_time', '0')):
                row[k] = row[k] or v
            w.writerow(row)


def pod(cpu, mem, gpus, milli):
    return {'cpu_milli': str(cpu), 'memory_mib': str(mem), 'num_gpu': str(gpus), 'gpu_milli': str(milli)}


def resampled(data, out, rng):
    default = load(data, 'default')
    cpu = [r for r in default if r['num_gpu'] == '0']
    gpu = [r for r in default if r['num_gpu'] != '0']
    share = [r for r in gpu if r['num_gpu'] == '1' and int(r['gpu_milli']) < 1000]
    whole = [r for r in gpu if not (r['num_gpu'] == '1' and int(r['gpu_milli']) < 1000)]
    single = [r for r in gpu if r['num_gpu'] == '1']
    multi = [r for r in load(data, 'multigpu20') if int(r['num_gpu']) > 1]
    spec = [r for r in load(data, 'gpuspec10') if r.get('gpu_spec') and r['num_gpu'] != '0']
    n = len(gpu)

    def mix(parts):
        rows = [rng.choice(pool) for pool, count in parts for _ in range(count)]
        rng.shuffle(rows)
        return rows

    write(out, 'synth_cpu250', mix([(gpu, n), (cpu, n // 3)]))
    write(out, 'synth_gpushare80', mix([(cpu, len(cpu)), (share, int(n * 0.8)), (whole, n - int(n * 0.8))]))
    write(out, 'synth_multigpu35', mix([(cpu, len(cpu)), (multi, int(n * 0.35)), (single, n - int(n * 0.35))]))
    write(out, 'synth_gpuspec33', mix([(cpu, len(cpu)), (spec, int(n * 0.33)), (gpu, n - int(n * 0.33))]))
    jitter = []
    for r in default:
        r = dict(r)
        if 0 < int(r['gpu_milli']) < 1000:
            r['gpu_milli'] = str(max(10, min(990, int(r['gpu_milli']) + rng.choice([-100, -50, 0, 50, 100]))))
        jitter.append(r)
    write(out, 'synth_default_jitter', jitter)


def draw(rng, count, mix):
    """`count` pods; `mix` lists (cumulative probability, make a pod) in order."""
    rows = []
    for _ in range(count):
        u = rng.random()
        rows.append(next(make for bound, make in mix if u < bound)())
    return rows


def made_up(out, rng):
    def gang():
        g = rng.choice([2, 4])
        return pod(12000 * g, 65536 * g, g, 1000)

    write(out, 'synth_uniform', draw(rng, 8000, [
        (0.55, lambda: pod(rng.choice([2000, 4000, 6000, 8000]), 8192, 1, rng.choice(range(100, 951, 50)))),
        (0.85, lambda: pod(rng.choice([8000, 12000, 16000]), 32768, 1, 1000)),
        (0.95, gang),
        (1.01, lambda: pod(rng.choice([8000, 16000, 32000]), 16384, 0, 0))]))
    write(out, 'synth_multigpu', draw(rng, 6000, [
        (0.2, lambda: pod(88000, 327680, 8, 1000)),
        (0.4, lambda: pod(44000, 163840, 4, 1000)),
        (0.8, lambda: pod(11000, 40960, 1, 1000)),
        (1.01, lambda: pod(4000, 8192, 1, rng.choice([250, 500])))]))
    write(out, 'synth_notebooks', draw(rng, 12000, [
        (0.7, lambda: pod(rng.choice([1000, 2000, 4000]), 4096, 1, rng.choice([100, 200, 250, 300, 330, 500]))),
        (0.95, lambda: pod(8000, 32768, 1, 1000)),
        (1.01, lambda: pod(4000, 8192, 0, 0))]))
    write(out, 'synth_cpuheavy', draw(rng, 8000, [
        (0.4, lambda: pod(24000, 65536, 1, 1000)),
        (0.6, lambda: pod(12000, 32768, 1, rng.choice([300, 500, 700]))),
        (0.8, lambda: pod(rng.choice([16000, 32000, 48000]), 65536, 0, 0)),
        (1.01, lambda: pod(40000, 131072, 2, 1000))]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument('--data', required=True, help='the directory holding the openb pod lists')
    parser.add_argument('--out', required=True, help='where to write the variants')
    parser.add_argument('--seed', type=int, default=11)
    args = parser.parse_args()
    os.makedirs(args.out, exist_ok=True)
    rng = random.Random(args.seed)
    resampled(args.data, args.out, rng)
    made_up(args.out, rng)


if __name__ == '__main__':
    main()

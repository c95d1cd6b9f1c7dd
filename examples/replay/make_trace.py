#!/usr/bin/env python3
"""Writes a synthetic week-day workload for `cnlab sim replay` in CNLab's generic CSV format.

Four teams share a cluster of 16 nodes x 8 H100 and 8 nodes x 4 L4 (the `--cluster` spec
16:h100x8,8:l4x4) for five days. Every row is drawn from the profiles below with a fixed seed, so
the committed mixed_week.csv is what this script writes:

    python3 examples/replay/make_trace.py > examples/replay/mixed_week.csv

Profiles (per team: class, how often jobs arrive, what they ask, how long they run):
  * vision   - heavy: 8-GPU H100 training (production, 4-16 h) and 1-GPU sweeps (opportunistic)
  * nlp      - 2-4 GPU H100 fine-tuning with deadlines (production), notebooks (dev, 10-50 % of a GPU)
  * speech   - inference services on L4 slices (25-50 %), running for days; notebooks
  * robotics - light: notebooks and a few 1-GPU production jobs with deadlines
Arrivals are Poisson, twice as frequent from 08:00 to 20:00 as at night. Deadlines are the
submit time plus the run time times a slack of 1.5 to 4. The offered load is printed on stderr.
"""
import math
import random
import sys

SEED = 2026
DAYS = 5
HORIZON = DAYS * 86400
H100, L4 = 128, 32

# (team, class, jobs per day, draw) where draw(rng) -> (duration s, num_gpus, share or None, model,
# deadline slack or None)
def training(rng):
    return rng.uniform(4, 16) * 3600, 8, None, "h100", None

def sweep(rng):
    return rng.uniform(1, 6) * 3600, 1, None, "h100", None

def finetune(rng):
    slack = rng.uniform(1.5, 4) if rng.random() < 0.6 else None
    return rng.uniform(2, 12) * 3600, rng.choice([2, 4]), None, "h100", slack

def notebook(rng):
    return rng.uniform(0.25, 4) * 3600, 1, rng.choice([0.1, 0.2, 0.25, 0.3, 0.5]), rng.choice(["h100", "h100", "l4"]), None

def service(rng):
    return rng.uniform(1, 4) * 86400, 1, rng.choice([0.25, 0.5]), "l4", None

def small_train(rng):
    return rng.uniform(1, 6) * 3600, 1, None, "h100", rng.uniform(1.5, 4)

PROFILES = [
    ("vision", "production", 16, training),
    ("vision", "opportunistic", 250, sweep),
    ("nlp", "production", 25, finetune),
    ("nlp", "dev", 40, notebook),
    ("speech", "inference", 16, service),
    ("speech", "dev", 30, notebook),
    ("robotics", "dev", 20, notebook),
    ("robotics", "production", 10, small_train),
]


def arrivals(rng, per_day):
    """Poisson arrivals with a day/night rate ratio of 2 (thinning of the peak rate)."""
    peak = per_day / 86400 * 4 / 3  # mean rate over a day = per_day / 86400
    t = 0.0
    while True:
        t += rng.expovariate(peak)
        if t >= HORIZON:
            return
        hour = (t % 86400) / 3600
        if 8 <= hour < 20 or rng.random() < 0.5:
            yield t


def main():
    rng = random.Random(SEED)
    rows = []
    demand = {"h100": 0.0, "l4": 0.0}
    for team, cls, per_day, draw in PROFILES:
        for t in arrivals(rng, per_day):
            duration, gpus, share, model, slack = draw(rng)
            deadline = "" if slack is None else f"{t + duration * slack:.0f}"
            rows.append((t, duration, gpus, "" if share is None else share, model, team, cls, deadline))
            demand[model] += duration * gpus * (share or 1)
    rows.sort(key=lambda r: r[0])
    out = sys.stdout
    out.write("submit_time,duration,num_gpus,gpu_share,model,project,class,deadline\n")
    for t, duration, gpus, share, model, team, cls, deadline in rows:
        out.write(f"{t:.0f},{duration:.0f},{gpus},{share},{model},{team},{cls},{deadline}\n")
    print(f"{len(rows)} jobs; offered load over {DAYS} days: H100 {demand['h100'] / (H100 * HORIZON):.0%}, "
          f"L4 {demand['l4'] / (L4 * HORIZON):.0%}", file=sys.stderr)


if __name__ == "__main__":
    main()

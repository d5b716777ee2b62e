"""The first task after ray.init, with task workers prestarted by ray.init and without
(issue 31 part 6), in the same run.

    cd bench && PYTHONPATH=../build/python /usr/bin/python3 first_task_bench.py [--reps 5]

Each repetition starts an embedded cluster (ray.init(num_cpus=2)), waits until its prestarted
workers are up (a driver that does anything else first: loads data, builds a model), then times
the first task's ray.get; then the second task's (the worker warm and the function known: the
floor). Rows alternate between prestart=1 and prestart=0; medians are reported, each as a ratio
to the floor of the same runs.
"""

import argparse
import os
import statistics
import time

from troupe import ray
from troupe.ray import _current


@ray.remote
def noop():
    return os.getpid()


def one(prestart):
    ray.init(num_cpus=2, _prestart_task_workers=prestart)
    try:
        for worker in list(_current.runtime().tasks.all):
            worker.ready().result(60)
        t0 = time.perf_counter()
        ray.get(noop.remote(), timeout=60)
        first = time.perf_counter() - t0
        t0 = time.perf_counter()
        ray.get(noop.remote(), timeout=60)
        return first, time.perf_counter() - t0
    finally:
        ray.shutdown()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    rows = {1: [], 0: []}
    for _ in range(args.reps):
        for prestart in (1, 0):
            rows[prestart].append(one(prestart))
    floor = statistics.median([second for r in rows.values() for _, second in r])
    print(f"second task (the floor), median of {2 * args.reps}: {floor * 1e3:.2f} ms")
    for prestart in (1, 0):
        firsts = [first for first, _ in rows[prestart]]
        med = statistics.median(firsts)
        print(f"prestart={prestart}: first task median {med * 1e3:.2f} ms "
              f"(min {min(firsts) * 1e3:.2f}, max {max(firsts) * 1e3:.2f}), "
              f"{med / floor:.1f}x the floor")


if __name__ == "__main__":
    main()

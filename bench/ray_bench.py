"""troupe.ray against troupe's native Python API, in the same run (issue 20's speed budget:
at most 1.3x for both).

    cd bench && PYTHONPATH=../build/python /usr/bin/python3 ray_bench.py [--reps 3] [--actors 256]

1. round trip: one no-op actor method call, waited for: ``ray.get(a.noop.remote())`` vs
   ``worker.call("noop").result()`` on a native worker of the same class (median of 2000 calls
   per repetition);
2. start-up: creating N actors until each answered a call, vs starting N native workers until
   each answered (``Cluster.start_worker`` then ``call``); also the rate in actors/s (issue 32
   asks for at least 200/s on 2 cores). The class is ray_bench_classes.Noop.
Repetitions are interleaved; medians are reported, with the ratio troupe.ray / native.
"""

import argparse
import statistics
import sys
import time

import troupe
from troupe import ray
from ray_bench_classes import Noop, RayNoop


def _round_trip_native(worker, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        worker.call("noop").result()
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def _round_trip_ray(actor, n):
    samples = []
    for _ in range(n):
        t = time.perf_counter()
        ray.get(actor.noop.remote())
        samples.append(time.perf_counter() - t)
    return statistics.median(samples)


def _startup_native(cluster, n, rep):
    t = time.perf_counter()
    workers = [cluster.start_worker(Noop, name=f"native-{rep}-{i}") for i in range(n)]
    troupe.gather([w.call("noop") for w in workers], timeout=600)
    elapsed = time.perf_counter() - t
    for w in workers:
        w.stop(1.0)
    return elapsed


def _startup_ray(n):
    t = time.perf_counter()
    actors = [RayNoop.remote() for _ in range(n)]
    ray.get([a.noop.remote() for a in actors], timeout=600)
    elapsed = time.perf_counter() - t
    for a in actors:
        ray.kill(a)
    return elapsed


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--actors", type=int, default=256)
    args = parser.parse_args()
    ray.init(log_to_driver=False)
    cluster = ray._current.runtime().cluster  # the same embedded cluster for both sides
    native = cluster.start_worker(Noop, name="native-rt")
    actor = RayNoop.remote()
    native.call("noop").result()
    ray.get(actor.noop.remote())
    rt = {"native": [], "ray": []}
    up = {"native": [], "ray": []}
    for rep in range(args.reps):
        rt["native"].append(_round_trip_native(native, args.calls))
        rt["ray"].append(_round_trip_ray(actor, args.calls))
        # Alternate which side starts first (the one started second may meet the exits of
        # the first one's processes).
        if rep % 2:
            up["ray"].append(_startup_ray(args.actors))
            up["native"].append(_startup_native(cluster, args.actors, rep))
        else:
            up["native"].append(_startup_native(cluster, args.actors, rep))
            up["ray"].append(_startup_ray(args.actors))
    n_rt, r_rt = statistics.median(rt["native"]), statistics.median(rt["ray"])
    n_up, r_up = statistics.median(up["native"]), statistics.median(up["ray"])
    print(f"actor call round trip: troupe.ray {r_rt * 1e6:.0f} us, native {n_rt * 1e6:.0f} us, "
          f"ratio {r_rt / n_rt:.2f}")
    print(f"create {args.actors} actors: troupe.ray {r_up:.2f} s ({args.actors / r_up:.0f} "
          f"actors/s), native {n_up:.2f} s, "
          f"ratio {r_up / n_up:.2f} (each rep: ray {up['ray']}, native {up['native']})")
    ray.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())

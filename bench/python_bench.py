"""Python driver benchmarks, each against a peer measured in the same run.

    PYTHONPATH=build/python /usr/bin/python3 bench/python_bench.py [--reps 5]

1. round trip: one no-op call Python driver -> Python worker, waited for, vs a
   multiprocessing.Pipe ping-pong between two Python processes (the same interpreter);
2. pipelined no-op calls per second (submit N, then wait for all) to one Python worker, vs
   multiprocessing.Pool(1).apply_async no-ops (and, as a peer of troupe's 8-worker C++ figure,
   multiprocessing.Pool(8).apply_async);
3. start-up of 16 Python workers until each answered a call, vs 16 multiprocessing processes
   (spawn and fork start methods) until each answered through a Pipe.
Each measurement repeats --reps times, interleaved with its peer; medians are reported.
"""

import argparse
import multiprocessing as mp
import os
import statistics
import sys
import time


class Noop:
    """The worker class (imported by name, python_bench.Noop, in the worker processes)."""

    def noop(self):
        return None


def _noop():
    return None


def _pipe_echo(conn):
    while True:
        msg = conn.recv()
        if msg is None:
            return
        conn.send(msg)


def _ready(conn):
    conn.send("ready")
    conn.recv()


def troupe_round_trip(worker, n):
    start = time.perf_counter()
    for _ in range(n):
        worker.call("noop").result()
    return (time.perf_counter() - start) / n


def pipe_round_trip(n):
    parent, child = mp.Pipe()
    p = mp.get_context("fork").Process(target=_pipe_echo, args=(child,))
    p.start()
    parent.send(0)
    parent.recv()
    start = time.perf_counter()
    for _ in range(n):
        parent.send(0)
        parent.recv()
    elapsed = time.perf_counter() - start
    parent.send(None)
    p.join()
    return elapsed / n


def troupe_pipelined(worker, n):
    start = time.perf_counter()
    futures = [worker.call("noop") for _ in range(n)]
    for f in futures:
        f.result()
    return n / (time.perf_counter() - start)


def pool_pipelined(pool, n):
    start = time.perf_counter()
    results = [pool.apply_async(_noop) for _ in range(n)]
    for r in results:
        r.get()
    return n / (time.perf_counter() - start)


def troupe_startup(cluster, k):
    start = time.perf_counter()
    workers = [cluster.start_worker("python_bench.Noop", host=i % 2) for i in range(k)]
    for w in workers:
        w.call("noop").result(120)
    elapsed = time.perf_counter() - start
    for w in workers:
        w.stop(3.0)
    return elapsed


def mp_startup(method, k):
    ctx = mp.get_context(method)
    start = time.perf_counter()
    procs = []
    for _ in range(k):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=_ready, args=(child,))
        p.start()
        procs.append((p, parent))
    for _, parent in procs:
        parent.recv()
    elapsed = time.perf_counter() - start
    for p, parent in procs:
        parent.send("bye")
        p.join()
    return elapsed


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--pipelined", type=int, default=20000)
    ap.add_argument("--workers", type=int, default=16)
    args = ap.parse_args()

    import troupe

    print(f"python {sys.version.split()[0]} ({sys.executable}), troupe {troupe.__version__}, "
          f"nproc {os.cpu_count()}, load {os.getloadavg()[0]:.2f}")
    rt, pipe, pl, pool_rate, pool8_rate, st, st_spawn, st_fork = ([] for _ in range(8))
    with troupe.Cluster(2, num_cpus_per_host=64, log_to_driver=False) as cluster:
        worker = cluster.start_worker("python_bench.Noop")
        worker.call("noop").result(60)
        troupe_round_trip(worker, 200)  # warm-up
        with mp.get_context("fork").Pool(1) as pool, mp.get_context("fork").Pool(8) as pool8:
            pool_pipelined(pool, 200)
            pool_pipelined(pool8, 200)
            for _ in range(args.reps):
                rt.append(troupe_round_trip(worker, args.calls))
                pipe.append(pipe_round_trip(args.calls))
                pl.append(troupe_pipelined(worker, args.pipelined))
                pool_rate.append(pool_pipelined(pool, args.pipelined))
                pool8_rate.append(pool_pipelined(pool8, args.pipelined))
        worker.stop()
        for _ in range(args.reps):
            st.append(troupe_startup(cluster, args.workers))
            st_spawn.append(mp_startup("spawn", args.workers))
            st_fork.append(mp_startup("fork", args.workers))

    med = statistics.median
    print(f"round trip (median of {args.reps} x {args.calls} calls):")
    print(f"  troupe Python->Python no-op call     {med(rt) * 1e6:8.1f} us")
    print(f"  multiprocessing.Pipe ping-pong       {med(pipe) * 1e6:8.1f} us")
    print(f"  RATIO troupe/pipe                    {med(rt) / med(pipe):8.2f}")
    print(f"pipelined no-op calls per second (median of {args.reps} x {args.pipelined}):")
    print(f"  troupe, 1 Python worker              {med(pl):10.0f} /s")
    print(f"  multiprocessing.Pool(1).apply_async  {med(pool_rate):10.0f} /s")
    print(f"  multiprocessing.Pool(8).apply_async  {med(pool8_rate):10.0f} /s")
    print(f"  RATIO troupe/pool                    {med(pl) / med(pool_rate):8.2f}")
    print(f"start-up of {args.workers} Python workers until each answered (median of {args.reps}):")
    print(f"  troupe (2 simulated hosts)           {med(st) * 1e3:8.0f} ms")
    print(f"  multiprocessing spawn                {med(st_spawn) * 1e3:8.0f} ms")
    print(f"  multiprocessing fork                 {med(st_fork) * 1e3:8.0f} ms")
    print(f"  RATIO troupe/spawn                   {med(st) / med(st_spawn):8.2f}")
    # One line per peer figure, for bench/run_all.sh's summary table.
    print(f"PEER python_pipe_round_trip_us {med(pipe) * 1e6:.1f}")
    print(f"PEER python_troupe_round_trip_us {med(rt) * 1e6:.1f}")
    print(f"PEER python_pool1_apply_async_per_s {med(pool_rate):.0f}")
    print(f"PEER python_pool8_apply_async_per_s {med(pool8_rate):.0f}")
    print(f"PEER python_troupe_pipelined_per_s {med(pl):.0f}")


if __name__ == "__main__":
    main()

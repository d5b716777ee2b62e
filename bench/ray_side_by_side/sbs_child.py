"""One system's part of bench/ray_side_by_side.py: runs the named rows in this process (one
ray.init for all) and prints one JSON line per event on stdout:

  {"event": "init", "seconds": S}                   ray.init returned
  {"event": "start", "row": NAME}                   a row begins
  {"event": "result", "row": NAME, "status": "ok", "rate": R, "sd": SD, "unit": U, ...}
  {"event": "result", "row": NAME, "status": "FAILED", "error": "..."}
  {"event": "shutdown", "seconds": S}

    python sbs_child.py --system ray|troupe --rows NAME,NAME... [--sleep S --warmup S
        --rounds K --round-s S --actors N --mem-actors N --fanout N --array-bytes B --readers R
        --reps K]

--system troupe calls troupe.ray.install() before `import ray`. Each row is ray_perf.py's:
the same setup, the same function, the same multiplier (rows marked `extra` are the
side-by-side bench's own). The orchestrator owns the per-row timeout."""

import argparse
import gc
import json
import os
import sys
import time
import traceback

_OUT = sys.stdout


def emit(**event):
    _OUT.write(json.dumps(event) + "\n")
    _OUT.flush()


def make_timeit(sleep_s, warmup_s, rounds, round_s):
    """ray_microbenchmark_helpers.timeit with its four constants as parameters (Ray's: a 10 s
    sleep, 1 s warm-up, 4 rounds of 2 s); the same loop otherwise. Returns (mean, sd)."""
    import numpy as np

    def timeit(fn, multiplier=1):
        time.sleep(sleep_s)
        start = time.perf_counter()
        count = 0
        while time.perf_counter() - start < warmup_s:
            fn()
            count += 1
        step = count // 10 + 1
        stats = []
        for _ in range(rounds):
            start = time.perf_counter()
            count = 0
            while time.perf_counter() - start < round_s:
                for _ in range(step):
                    fn()
                count += step
            end = time.perf_counter()
            stats.append(multiplier * count / (end - start))
        return float(np.mean(stats)), float(np.std(stats))

    return timeit


# ---- process memory -----------------------------------------------------------------------


def _pss_kib(pid):
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def cluster_processes(marker):
    """PIDs of this driver's cluster: every process whose environment carries `marker` (the
    orchestrator's SBS_RUN=...; Ray's raylet, GCS and workers and troupe's agents and workers
    inherit it) or that descends from this driver, the driver itself left out."""
    me = os.getpid()
    parent = {}
    marked = set()
    needle = marker.encode()
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        pid = int(d)
        try:
            with open(f"/proc/{pid}/stat") as f:
                parent[pid] = int(f.read().rsplit(")", 1)[1].split()[1])
            with open(f"/proc/{pid}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    marked.add(pid)
        except (OSError, ValueError, IndexError):
            continue
    tree = set()
    for pid in parent:
        p, seen = pid, 0
        while p > 1 and seen < 64:
            if p == me:
                tree.add(pid)
                break
            p, seen = parent.get(p, 0), seen + 1
    return sorted((marked | tree) - {me})


def memory_snapshot(marker):
    pids = cluster_processes(marker)
    total = 0
    names = {}
    for pid in pids:
        kib = _pss_kib(pid)
        if kib is None:
            continue
        total += kib
        try:
            with open(f"/proc/{pid}/comm") as f:
                name = f.read().strip()
        except OSError:
            name = "?"
        n, k = names.get(name, (0, 0))
        names[name] = (n + 1, k + kib)
    return {"processes": len(pids), "pss_mib": total / 1024.0,
            "driver_pss_mib": (_pss_kib(os.getpid()) or 0) / 1024.0,
            "by_name": {k: [v[0], round(v[1] / 1024.0, 1)] for k, v in
                        sorted(names.items(), key=lambda kv: -kv[1][1])}}


# ---- rows -----------------------------------------------------------------------------------


def build_rows(ray, w, timeit, args):
    """name -> function() returning the row's result dict. Setup code and functions are
    ray_perf.main()'s, in its order."""
    import numpy as np

    rows = {}

    def row(name):
        def deco(fn):
            rows[name] = fn
            return fn
        return deco

    def rate(fn, multiplier=1, unit="/s"):
        mean, sd = timeit(fn, multiplier)
        return {"rate": mean, "sd": sd, "unit": unit}

    state = {}

    def value():
        if "value" not in state:
            state["value"] = ray.put(0)
        return state["value"]

    @row("single client get calls (Plasma Store)")
    def _():
        v = value()

        def get_small():
            ray.get(v)
        return rate(get_small)

    @row("single client put calls (Plasma Store)")
    def _():
        def put_small():
            ray.put(0)
        return rate(put_small)

    @row("multi client put calls (Plasma Store)")
    def _():
        def put_multi_small():
            ray.get([w.do_put_small.remote() for _ in range(10)])
        return rate(put_multi_small, 1000)

    @row("single client put gigabytes")
    def _():
        arr = np.zeros(100 * 1024 * 1024, dtype=np.int64)

        def put_large():
            ray.put(arr)
        return rate(put_large, 8 * 0.1, "GB/s")

    @row("single client tasks and get batch")
    def _():
        def small_value_batch():
            submitted = [w.small_value.remote() for _ in range(1000)]
            ray.get(submitted)
            return 0
        return rate(small_value_batch)

    @row("multi client put gigabytes")
    def _():
        def put_multi():
            ray.get([w.do_put.remote() for _ in range(10)])
        return rate(put_multi, 10 * 8 * 0.1, "GB/s")

    @row("single client get object containing 10k refs")
    def _():
        obj_containing_ref = w.create_object_containing_ref.remote()

        def get_containing_object_ref():
            ray.get(obj_containing_ref)
        return rate(get_containing_object_ref)

    @row("single client wait 1k refs")
    def _():
        def wait_multiple_refs():
            num_objs = 1000
            not_ready = [w.small_value.remote() for _ in range(num_objs)]
            fetch_local = True
            for _ in range(num_objs):
                _ready, not_ready = ray.wait(not_ready, fetch_local=fetch_local)
                if fetch_local:
                    fetch_local = False
        return rate(wait_multiple_refs)

    @row("single client tasks sync")
    def _():
        def small_task():
            ray.get(w.small_value.remote())
        return rate(small_task)

    @row("single client tasks async")
    def _():
        def small_task_async():
            ray.get([w.small_value.remote() for _ in range(1000)])
        return rate(small_task_async, 1000)

    @row("multi client tasks async")
    def _():
        n, m = 10000, 4
        actors = [w.Actor.remote() for _ in range(m)]

        def multi_task():
            submitted = [a.small_value_batch.remote(n) for a in actors]
            ray.get(submitted)
        return rate(multi_task, n * m)

    @row("1:1 actor calls sync")
    def _():
        a = w.Actor.remote()

        def actor_sync():
            ray.get(a.small_value.remote())
        return rate(actor_sync)

    @row("1:1 actor calls async")
    def _():
        a = w.Actor.remote()

        def actor_async():
            ray.get([a.small_value.remote() for _ in range(1000)])
        return rate(actor_async, 1000)

    @row("1:1 actor calls concurrent")
    def _():
        a = w.Actor.options(max_concurrency=16).remote()

        def actor_concurrent():
            ray.get([a.small_value.remote() for _ in range(1000)])
        return rate(actor_concurrent, 1000)

    @row("1:n actor calls async")
    def _():
        n = 5000
        # ray_perf.py: Actor._remote(), the private spelling of .remote() with no arguments.
        actors = [w.Actor.remote() for _ in range(w.n_cpu)]
        client = w.Client.remote(actors)

        def actor_async_direct():
            ray.get(client.small_value_batch.remote(n))
        return rate(actor_async_direct, n * len(actors))

    @row("n:n actor calls async")
    def _():
        n, m = w.n, 4
        a = [w.Actor.remote() for _ in range(w.n_cpu)]

        def actor_multi2():
            ray.get([w.work.remote(a) for _ in range(m)])
        return rate(actor_multi2, m * n)

    @row("n:n actor calls with arg async")
    def _():
        n = 1000
        actors = [w.Actor.remote() for _ in range(w.n_cpu)]  # ray_perf.py: Actor._remote()
        clients = [w.Client.remote(a) for a in actors]

        def actor_multi2_direct_arg():
            ray.get([c.small_value_batch_arg.remote(n) for c in clients])
        return rate(actor_multi2_direct_arg, n * len(clients))

    @row("1:1 async-actor calls sync")
    def _():
        a = w.AsyncActor.remote()

        def actor_sync():
            ray.get(a.small_value.remote())
        return rate(actor_sync)

    @row("1:1 async-actor calls async")
    def _():
        a = w.AsyncActor.remote()

        def async_actor():
            ray.get([a.small_value.remote() for _ in range(1000)])
        return rate(async_actor, 1000)

    @row("1:1 async-actor calls with args async")
    def _():
        a = w.AsyncActor.remote()

        def async_actor():
            ray.get([a.small_value_with_arg.remote(i) for i in range(1000)])
        return rate(async_actor, 1000)

    @row("1:n async-actor calls async")
    def _():
        n = 5000
        actors = [w.AsyncActor.remote() for _ in range(w.n_cpu)]
        client = w.Client.remote(actors)

        def async_actor_async():
            ray.get(client.small_value_batch.remote(n))
        return rate(async_actor_async, n * len(actors))

    @row("n:n async-actor calls async")
    def _():
        n, m = w.n, 4
        a = [w.AsyncActor.remote() for _ in range(w.n_cpu)]

        def async_actor_multi():
            ray.get([w.async_actor_work.remote(a) for _ in range(m)])
        return rate(async_actor_multi, m * n)

    @row("placement group create/removal")
    def _():
        NUM_PGS = 100
        NUM_BUNDLES = 1

        def placement_group_create_removal(num_pgs):
            pgs = [
                ray.util.placement_group(
                    bundles=[{"custom": 0.001} for _ in range(NUM_BUNDLES)]
                )
                for _ in range(num_pgs)
            ]
            [pg.wait(timeout_seconds=30) for pg in pgs]
            for pg in pgs:
                ray.util.remove_placement_group(pg)
        return rate(lambda: placement_group_create_removal(NUM_PGS), NUM_PGS)

    # ---- the side-by-side bench's own rows (not in ray_perf.py) ----

    @row("extra: actors created and ready")
    def _():
        n_actors = args.actors
        samples = []
        for _ in range(args.reps):
            t = time.perf_counter()
            actors = [w.Actor.remote() for _ in range(n_actors)]
            ray.get([a.small_value.remote() for a in actors])
            samples.append(time.perf_counter() - t)
            for a in actors:
                ray.kill(a)
            del actors
            gc.collect()
            time.sleep(1.0)  # let the killed actors' processes go before the next repetition
        rates = [n_actors / s for s in samples]
        return {"rate": float(np.mean(rates)), "sd": float(np.std(rates)), "unit": "actors/s",
                "seconds": samples, "n": n_actors}

    @row("extra: array read by readers")
    def _():
        nbytes, readers_n = args.array_bytes, args.readers
        arr = np.ones(nbytes // 8, dtype=np.uint64)
        expect = nbytes // 8
        readers = [w.Reader.remote() for _ in range(readers_n)]
        ray.get([r.ready.remote() for r in readers])
        samples = []
        for _ in range(args.reps):
            t = time.perf_counter()
            ref = ray.put(arr)
            sums = ray.get([r.checksum.remote(ref) for r in readers])
            samples.append(time.perf_counter() - t)
            if any(s != expect for s in sums):
                raise AssertionError(f"checksums {sums}, expected {expect} each")
            del ref
            gc.collect()
        gib = nbytes / float(1 << 30)
        rates = [gib * readers_n / s for s in samples]
        return {"rate": float(np.mean(rates)), "sd": float(np.std(rates)),
                "unit": "GiB read/s", "seconds": samples, "readers": readers_n,
                "array_gib": gib}

    @row("extra: call to N actors, gathered")
    def _():
        actors = [w.Actor.remote() for _ in range(args.fanout)]
        ray.get([a.small_value.remote() for a in actors])

        def call_all():
            ray.get([a.small_value.remote() for a in actors])
        return rate(call_all, args.fanout)

    @row(MEMORY_ROW)
    def _():
        gc.collect()
        time.sleep(args.idle_s)
        before = memory_snapshot(args.marker)
        t = time.perf_counter()
        actors = [w.Actor.remote() for _ in range(args.mem_actors)]
        ray.get([a.small_value.remote() for a in actors])
        ready_s = time.perf_counter() - t
        time.sleep(args.idle_s)
        after = memory_snapshot(args.marker)
        del actors
        return {"rate": after["pss_mib"], "sd": 0.0, "unit": "MiB PSS", "before": before,
                "after": after, "n": args.mem_actors, "ready_s": ready_s}

    return rows


MEMORY_ROW = "extra: memory of the cluster, idle with N actors"


def parse_args(p):
    p.add_argument("--system", choices=["ray", "troupe", "monarch"], default="monarch")
    p.add_argument("--rows", required=True, help="row names joined by '\\n'")
    p.add_argument("--sleep", type=float, default=10.0)
    p.add_argument("--warmup", type=float, default=1.0)
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--round-s", type=float, default=2.0)
    p.add_argument("--actors", type=int, default=64)
    p.add_argument("--mem-actors", type=int, default=64)
    p.add_argument("--fanout", type=int, default=8)
    p.add_argument("--array-bytes", type=int, default=1 << 30)
    p.add_argument("--readers", type=int, default=8)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--idle-s", type=float, default=3.0)
    p.add_argument("--marker", default="")
    p.add_argument("--profile", default="", help="write a cProfile of the driver's rows here")
    return p.parse_args()


def run_rows(rows, args):
    """Runs args.rows in order, one start and one result event each."""
    profiler = None
    if args.profile:
        import cProfile

        profiler = cProfile.Profile()
    for name in args.rows.split("\n"):
        emit(event="start", row=name)
        t = time.perf_counter()
        try:
            if name not in rows:
                raise KeyError(f"no row named {name!r} on {args.system}")
            if profiler:
                profiler.enable()
            result = rows[name]()
            if profiler:
                profiler.disable()
            emit(event="result", row=name, status="ok", wall_s=time.perf_counter() - t,
                 **result)
        except BaseException as e:  # noqa: BLE001 - a failed row is reported, the run goes on
            if profiler:
                profiler.disable()
            emit(event="result", row=name, status="FAILED", wall_s=time.perf_counter() - t,
                 error=f"{type(e).__name__}: {e}"[:500], trace=traceback.format_exc()[-2000:])
            if isinstance(e, KeyboardInterrupt):
                break
        gc.collect()
    if profiler:
        profiler.dump_stats(args.profile)


def main():
    args = parse_args(argparse.ArgumentParser())
    if args.system == "troupe":
        import troupe.ray

        troupe.ray.install()
    import ray

    t = time.perf_counter()
    ray.init(resources={"custom": 100})  # ray_perf.py's placement-group init; the rest: ray.init()
    emit(event="init", seconds=time.perf_counter() - t, module=ray.__file__)
    import sbs_workloads as w

    rows = build_rows(ray, w, make_timeit(args.sleep, args.warmup, args.rounds, args.round_s),
                      args)
    run_rows(rows, args)
    t = time.perf_counter()
    ray.shutdown()
    emit(event="shutdown", seconds=time.perf_counter() - t)


if __name__ == "__main__":
    main()

"""Monarch's part of bench/ray_side_by_side.py (issue 30 part 4): torchmonarch 0.7.0 from a
scratch venv (/tmp/monarch-venv: python3 -m venv, pip install torch==2.13.0, then
torchmonarch==0.7.0), the same event protocol as sbs_child.py. Monarch's unit is an actor per
process of a ProcMesh, so the rows are the ones with a Monarch counterpart:

  extra: actors created and ready       spawn_procs(per_host={"procs": N}) + spawn + call().get()
  1:1 actor calls sync                  one actor's small_value.call_one().get()
  1:1 actor calls async                 1000 call_one() futures, then each .get()
  extra: call to N actors, gathered     the mesh's small_value.call().get() (a broadcast with
                                        N replies)
  extra: memory of the cluster, idle with N actors   PSS as in sbs_child.py

    /tmp/monarch-venv/bin/python sbs_monarch.py --rows ... (sbs_child.py's options)"""

import argparse
import gc
import sys
import time

import sbs_child
from sbs_child import emit, make_timeit, memory_snapshot


def build_rows(timeit, args):
    from monarch.actor import Actor, endpoint, this_host

    class Small(Actor):
        """ray_perf.py's Actor.small_value as a Monarch endpoint."""

        @endpoint
        def small_value(self) -> bytes:
            return b"ok"

    rows = {}
    host = this_host()
    state = {}

    def one():
        if "one" not in state:
            procs = host.spawn_procs(per_host={"procs": 1}, name="one")
            state["one"] = (procs, procs.spawn("small", Small))
            state["one"][1].small_value.call().get()
        return state["one"][1].slice(procs=0)

    def row(name):
        def deco(fn):
            rows[name] = fn
            return fn
        return deco

    def rate(fn, multiplier=1, unit="/s"):
        mean, sd = timeit(fn, multiplier)
        return {"rate": mean, "sd": sd, "unit": unit}

    @row("1:1 actor calls sync")
    def _():
        a = one()

        def actor_sync():
            a.small_value.call_one().get()
        return rate(actor_sync)

    @row("1:1 actor calls async")
    def _():
        a = one()

        def actor_async():
            futures = [a.small_value.call_one() for _ in range(1000)]
            [f.get() for f in futures]
        return rate(actor_async, 1000)

    @row("extra: call to N actors, gathered")
    def _():
        procs = host.spawn_procs(per_host={"procs": args.fanout}, name="fanout")
        mesh = procs.spawn("small", Small)
        mesh.small_value.call().get()

        def call_all():
            mesh.small_value.call().get()
        try:
            return rate(call_all, args.fanout)
        finally:
            procs.stop().get()

    @row("extra: actors created and ready")
    def _():
        samples = []
        for rep in range(args.reps):
            t = time.perf_counter()
            procs = host.spawn_procs(per_host={"procs": args.actors}, name=f"create{rep}")
            mesh = procs.spawn("small", Small)
            mesh.small_value.call().get()
            samples.append(time.perf_counter() - t)
            procs.stop().get()
            gc.collect()
            time.sleep(1.0)
        rates = [args.actors / s for s in samples]
        import statistics

        return {"rate": statistics.mean(rates), "sd": statistics.pstdev(rates),
                "unit": "actors/s", "seconds": samples, "n": args.actors}

    @row(sbs_child.MEMORY_ROW)
    def _():
        gc.collect()
        time.sleep(args.idle_s)
        before = memory_snapshot(args.marker)
        t = time.perf_counter()
        procs = host.spawn_procs(per_host={"procs": args.mem_actors}, name="mem")
        mesh = procs.spawn("small", Small)
        mesh.small_value.call().get()
        ready_s = time.perf_counter() - t
        time.sleep(args.idle_s)
        after = memory_snapshot(args.marker)
        procs.stop().get()
        return {"rate": after["pss_mib"], "sd": 0.0, "unit": "MiB PSS", "before": before,
                "after": after, "n": args.mem_actors, "ready_s": ready_s}

    return rows, state


def main():
    args = sbs_child.parse_args(argparse.ArgumentParser())
    t = time.perf_counter()
    import monarch

    emit(event="init", seconds=time.perf_counter() - t, module=monarch.__file__)
    rows, state = build_rows(make_timeit(args.sleep, args.warmup, args.rounds, args.round_s),
                             args)
    sbs_child.run_rows(rows, args)
    t = time.perf_counter()
    if "one" in state:
        state["one"][0].stop().get()
    emit(event="shutdown", seconds=time.perf_counter() - t)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

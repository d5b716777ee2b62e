"""Python worker start-up: troupe's Python fork server vs exec'd workers vs multiprocessing.

For N workers of a class whose module imports a heavy module (torch when /usr/bin/python3 can
import it, else numpy): the seconds from the first start until every worker answered one call,
and the sum of the workers' PSS (/proc/PID/smaps_rollup) once they all answered.

  troupe fork   Cluster(python_preload=[heavy]): workers forked from the host's Python fork
                server (its start and preload included: a new cluster each run)
  troupe warm   the same, the fork server started and preloaded before the clock (one worker
                started first, not counted): what mp fork's parent has too
  troupe exec   the same class, each worker exec'd (env TROUPE_FORK_SERVER=0)
  mp spawn      multiprocessing "spawn" context (a fresh interpreter per process)
  mp fork       multiprocessing "fork" from a parent that imported the heavy module

Then, in that parent, the process creation alone (children exit at once, nothing else timed):
  bare fork     N os.fork() (what mp fork does per worker)
  double fork   N times: os.fork() of an intermediate that forks the child and exits (the
                agent becomes the parent by the intermediate's exit, FS-3)
  vfork fork    N times: the same through a vfork()ed intermediate, which shares the parent's
                memory (troupe._core.fork_past_intermediate: what the fork server does per worker)

Usage: PYTHONPATH=build/python nice /usr/bin/python3 bench/python_fork_bench.py [--n 16 64]
       [--rows "troupe warm,mp fork,bare fork,vfork fork"]   (default: every row)
"""

import argparse
import importlib
import multiprocessing
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))


def pss_kib(pids):
    total = 0
    for pid in pids:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    total += int(line.split()[1])
    return total


def run_troupe(n, heavy, fork, warm=False):
    import troupe

    env = {"BENCH_HEAVY": heavy, "TROUPE_FORK_SERVER": "1" if fork else "0"}
    # Warm: the fork server has what mp fork's parent has, the heavy module and the class's.
    preload = [heavy, "fork_bench_worker"] if warm else [heavy]
    with troupe.Cluster(log_to_driver=False, start_timeout=60,
                        python_preload=preload if fork else []) as c:
        if warm:
            c.start_worker("fork_bench_worker.Heavy", env=env).call("ping").result(timeout=600)
        t0 = time.monotonic()
        workers = [c.start_worker("fork_bench_worker.Heavy", env=env) for _ in range(n)]
        pids = [w.call("ping").result(timeout=600) for w in workers]
        elapsed = time.monotonic() - t0
        return elapsed, pss_kib(pids)


def run_mp(n, heavy, method):
    ctx = multiprocessing.get_context(method)
    if method == "fork":
        importlib.import_module(heavy)
    import fork_bench_worker

    t0 = time.monotonic()
    conns, procs = [], []
    for _ in range(n):
        parent, child = ctx.Pipe()
        p = ctx.Process(target=fork_bench_worker.child_main, args=(child,))
        p.start()
        conns.append(parent)
        procs.append(p)
    pids = [c.recv() for c in conns]
    elapsed = time.monotonic() - t0
    pss = pss_kib(pids)
    for c in conns:
        c.send("exit")
    for p in procs:
        p.join()
    return elapsed, pss


def fork_cost(n, double):
    t0 = time.monotonic()
    if double == "vfork":
        from troupe import _core

        for _ in range(n):
            if _core.fork_past_intermediate()[0] == 0:
                os._exit(0)
        for _ in range(n):  # reparented to us (subreaper)
            os.waitpid(-1, 0)
        return time.monotonic() - t0
    for _ in range(n):
        r, w = os.pipe()
        pid = os.fork()
        if pid == 0:
            if double and os.fork() != 0:
                os.write(w, b"x")
            os._exit(0)
        os.close(w)
        if double:
            os.read(r, 1)
        os.close(r)
    for _ in range(2 * n if double else n):  # the children reparented to us too (subreaper)
        os.waitpid(-1, 0)
    return time.monotonic() - t0


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, nargs="+", default=[16, 64])
    ap.add_argument("--heavy", default=None, help="module the class imports (default torch/numpy)")
    ap.add_argument("--rows", default=None, help="comma-separated launcher names (default: all)")
    args = ap.parse_args()
    wanted = set(args.rows.split(",")) if args.rows else None

    def chosen(name):
        return wanted is None or name in wanted

    heavy = args.heavy
    if heavy is None:
        try:
            importlib.import_module("torch")
            heavy = "torch"
        except ImportError:
            heavy = "numpy"
    os.environ["BENCH_HEAVY"] = heavy  # for multiprocessing's children
    print(f"class imports {heavy}; {os.cpu_count()} cores")
    print(f"{'N':>4} {'launcher':<12} {'seconds':>8} {'PSS sum MiB':>12}")
    for n in args.n:
        rows = [("troupe fork", lambda: run_troupe(n, heavy, True)),
                ("troupe warm", lambda: run_troupe(n, heavy, True, warm=True)),
                ("troupe exec", lambda: run_troupe(n, heavy, False)),
                ("mp spawn", lambda: run_mp(n, heavy, "spawn"))]
        for name, fn in rows:
            if not chosen(name):
                continue
            elapsed, pss = fn()
            print(f"{n:>4} {name:<12} {elapsed:8.2f} {pss / 1024:12.0f}", flush=True)
    # Last: it imports the heavy module into this process.
    for n in args.n if chosen("mp fork") else []:
        elapsed, pss = run_mp(n, heavy, "fork")
        print(f"{n:>4} {'mp fork':<12} {elapsed:8.2f} {pss / 1024:12.0f}", flush=True)
    importlib.import_module(heavy)  # the fork rows: from a parent that imported it
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER, as the agent
    for n in args.n:
        for name, double in (("bare fork", False), ("double fork", True),
                             ("vfork fork", "vfork")):
            if not chosen(name):
                continue
            print(f"{n:>4} {name:<12} {fork_cost(n, double):8.2f}", flush=True)


if __name__ == "__main__":
    main()

"""troupe.ray beside Ray on Ray's own microbenchmark (issue 30 part 1).

    bash bench/ray_side_by_side.sh [--quick] [--skip-ray-own] [--rows PAT,PAT] [...]

One invocation runs, one after the other, each in its own process and session:
  1. Ray's own `ray microbenchmark` (ray/_private/ray_perf.py in the peers venv's wheel; in
     --quick mode its main() with the quick measurement constants, bench/ray_side_by_side/
     sbs_ray_own.py), unless --skip-ray-own;
  2. the rows below on Ray (the peers venv's python);
  3. the same rows on troupe.ray (Debian's python3, PYTHONPATH=build/python,
     troupe.ray.install() before `import ray`).
Every row is ray_perf.py's: the same class and function bodies (bench/ray_side_by_side/
sbs_workloads.py), batch sizes and multipliers, and ray_microbenchmark_helpers.timeit's loop
(sbs_child.py); the rows named `extra:` are this bench's own. A row that fails prints FAILED
with its error; one that runs past --row-timeout is killed (its process group, and for Ray
`ray stop --force`), prints TIMEOUT, and the rest run in a fresh process. Afterwards every
process carrying this run's SBS_RUN marker is killed and the check that none remains printed.

Prints one table: row, Ray's rate, troupe.ray's rate, troupe.ray / Ray, and Ray's own script's
rate for the same row (with ours / own). Rows that rest on Ray internals are listed after it
with the reason.
"""

import argparse
import json
import os
import queue
import re
import signal
import subprocess
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
SBS = os.path.join(HERE, "ray_side_by_side")
PEERS = os.path.join(ROOT, ".venv-peers")
RAY_PY = os.path.join(PEERS, "bin", "python")
RAY_CLI = os.path.join(PEERS, "bin", "ray")

PERF_ROWS = [
    "single client get calls (Plasma Store)",
    "single client put calls (Plasma Store)",
    "multi client put calls (Plasma Store)",
    "single client put gigabytes",
    "single client tasks and get batch",
    "multi client put gigabytes",
    "single client get object containing 10k refs",
    "single client wait 1k refs",
    "single client tasks sync",
    "single client tasks async",
    "multi client tasks async",
    "1:1 actor calls sync",
    "1:1 actor calls async",
    "1:1 actor calls concurrent",
    "1:n actor calls async",
    "n:n actor calls async",
    "n:n actor calls with arg async",
    "1:1 async-actor calls sync",
    "1:1 async-actor calls async",
    "1:1 async-actor calls with args async",
    "1:n async-actor calls async",
    "n:n async-actor calls async",
    "placement group create/removal",
]
MEMORY_ROW = "extra: memory of the cluster, idle with N actors"
EXTRA_ROWS = ["extra: actors created and ready", "extra: call to N actors, gathered",
              "extra: array read by readers"]
# The rows with a Monarch counterpart (sbs_monarch.py): an actor per process of a ProcMesh.
MONARCH_ROWS = [MEMORY_ROW, "1:1 actor calls sync", "1:1 actor calls async",
                "extra: actors created and ready", "extra: call to N actors, gathered"]

OUT_OF_SCOPE = [
    ("client: get calls, put calls, tasks and get batch, tasks and put batch, put gigabytes, "
     "1:1 actor calls sync/async/concurrent (ray_client_microbenchmark.py, run by "
     "`ray microbenchmark` after the rows above)",
     "Ray Client: a driver talking to a ray:// gRPC proxy server. troupe.ray refuses ray:// "
     "(NotSupportedError); a remote driver attaches with TROUPE_ADDRESS instead"),
    ("[unstable] ... channel calls (5 rows of ray_experimental_perf.py)",
     "ray.experimental.channel: the shared-memory channels of Ray's compiled graphs, Ray "
     "core-worker internals with no public API; not run by `ray microbenchmark` in Ray 2.60"),
    ("[unstable] (compiled) single-actor / scatter-gather / chain / multiple-args DAG calls "
     "(16 rows of ray_experimental_perf.py)",
     "ray.dag and compiled graphs (.bind, experimental_compile): troupe.ray refuses DAGs "
     "(NotSupportedError); not run by `ray microbenchmark` in Ray 2.60"),
    ("callbacks on the core worker",
     "none in Ray 2.60's ray_perf.py (no row of this wheel uses them)"),
]

OWN_LINE = re.compile(r"^(.+?) per second ([0-9.eE+-]+) \+- ([0-9.eE+-]+)\s*$")


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---- processes ------------------------------------------------------------------------------


def marked_pids(marker):
    needle = marker.encode()
    found = []
    for d in os.listdir("/proc"):
        if not d.isdigit() or int(d) == os.getpid():
            continue
        try:
            with open(f"/proc/{d}/environ", "rb") as f:
                if needle in f.read().split(b"\0"):
                    found.append(int(d))
        except OSError:
            continue
    return found


def kill_marked(marker):
    """SIGKILLs, by PID, every process this run started (they carry its marker); returns how
    many there were."""
    pids = marked_pids(marker)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    deadline = time.time() + 10
    while marked_pids(marker) and time.time() < deadline:
        time.sleep(0.1)
    return len(pids)


def kill_group(proc):
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    try:
        proc.wait(10)
    except subprocess.TimeoutExpired:
        pass


def ray_stop():
    subprocess.run([RAY_CLI, "stop", "--force"], stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, timeout=120)


def ray_processes():
    """Ray's processes left on this machine (ps)."""
    out = subprocess.run(["ps", "-eo", "pid,args"], capture_output=True, text=True).stdout
    pat = re.compile(r"raylet|gcs_server|ray::|default_worker\.py|ray/dashboard|"
                     r"log_monitor\.py|monitor\.py --|runtime_env/agent")
    return [line.strip() for line in out.splitlines()[1:] if pat.search(line)]


def child_env(system, marker):
    env = dict(os.environ)
    env["SBS_RUN"] = marker.split("=", 1)[1]
    path = [SBS]
    if system == "troupe":
        path.insert(0, os.path.join(ROOT, "build", "python"))
    env["PYTHONPATH"] = ":".join(path)
    env.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    env.pop("TROUPE_ADDRESS", None)
    return env


# ---- one system's rows ----------------------------------------------------------------------


def run_system(system, rows, args, marker):
    """{row: result} for `system`, each row's result an sbs_child result event, or
    status TIMEOUT / FAILED."""
    python = {"ray": RAY_PY, "troupe": "/usr/bin/python3", "monarch": args.monarch_python}[system]
    script = "sbs_monarch.py" if system == "monarch" else "sbs_child.py"
    results, info = {}, {"inits": [], "shutdowns": [], "leftovers": 0}
    pending = list(rows)
    while pending:
        cmd = [python, os.path.join(SBS, script), "--system", system,
               "--rows", "\n".join(pending), "--marker", marker] + args.child_args
        err = tempfile.TemporaryFile(mode="w+")
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=err, text=True,
                                env=child_env(system, marker), start_new_session=True,
                                cwd=SBS)
        lines = queue.Queue()

        def pump(stream=proc.stdout):
            for line in stream:
                lines.put(line)
            lines.put(None)
        threading.Thread(target=pump, daemon=True).start()

        current, deadline, inited = None, time.time() + args.init_timeout, False
        while True:
            try:
                line = lines.get(timeout=max(0.1, deadline - time.time()))
            except queue.Empty:
                line = "TIMEOUT"
            if line == "TIMEOUT":
                what = current or "ray.init"
                log(f"{system}: {what} ran past its timeout; killing the child")
                kill_group(proc)
                if current:
                    results[current] = {"status": "TIMEOUT", "error":
                                        f"no result within {args.row_timeout:.0f} s"}
                    pending = pending[pending.index(current) + 1:]
                else:
                    for r in pending:
                        results[r] = {"status": "FAILED", "error": "ray.init timed out"}
                    pending = []
                break
            if line is None:  # the child ended
                proc.wait()
                err.seek(0)
                tail = err.read()[-1500:]
                if current:
                    results[current] = {"status": "FAILED", "error":
                                        f"child exited rc={proc.returncode}: {tail.strip()}"}
                    pending = pending[pending.index(current) + 1:]
                elif not inited:
                    for r in pending:
                        results[r] = {"status": "FAILED", "error": f"ray.init failed "
                                      f"(rc={proc.returncode}): {tail.strip()[-600:]}"}
                    pending = []
                else:
                    pending = []
                break
            try:
                ev = json.loads(line)
            except ValueError:
                continue
            if ev["event"] == "init":
                inited = True
                info["inits"].append(ev["seconds"])
                log(f"{system}: ray.init took {ev['seconds']:.1f} s ({ev['module']})")
            elif ev["event"] == "start":
                current, deadline = ev["row"], time.time() + args.row_timeout
            elif ev["event"] == "result":
                results[ev["row"]] = ev
                pending.remove(ev["row"])
                rate = (f"{ev['rate']:.2f} {ev['unit']}" if ev["status"] == "ok"
                        else f"{ev['status']}: {ev['error']}")
                log(f"{system}: {ev['row']}: {rate} ({ev['wall_s']:.1f} s)")
                current, deadline = None, time.time() + args.row_timeout
            elif ev["event"] == "shutdown":
                info["shutdowns"].append(ev["seconds"])
        kill_group(proc)
        if system == "ray":
            ray_stop()
        info["leftovers"] += kill_marked(marker)
    return results, info


def run_ray_own(args, marker):
    """{row: (rate, sd)} from Ray's own script, and its wall time."""
    has_grpc = subprocess.run([RAY_PY, "-c", "import grpc"], capture_output=True).returncode == 0
    if args.quick or not has_grpc:
        client = has_grpc and (args.own_client or not args.quick)
        cmd = [RAY_PY, os.path.join(SBS, "sbs_ray_own.py"), "--sleep", str(args.sleep),
               "--scale", str(args.round_s / 2.0)] + (["--client"] if client else [])
        label = (f"ray_perf.main() (sbs_ray_own.py: timeit's sleep {args.sleep:g} s, warm-up "
                 f"{args.round_s / 2:g} s, 4 rounds of {args.round_s:g} s"
                 f"{'' if client else '; without the Ray Client rows'})")
        if not has_grpc:
            label += ("; `ray microbenchmark` itself fails in the peers venv: ray_perf.py "
                      "imports the Ray Client rows' module, which imports grpc, not installed")
    else:
        cmd = [RAY_CLI, "microbenchmark"]
        label = "ray microbenchmark"
    log(f"Ray's own: {' '.join(cmd)}")
    t = time.time()
    out = tempfile.TemporaryFile(mode="w+")
    proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, text=True,
                            env=child_env("ray", marker), start_new_session=True, cwd=SBS)
    status = "ok"
    try:
        proc.wait(args.own_timeout)
    except subprocess.TimeoutExpired:
        status = f"TIMEOUT after {args.own_timeout} s"
    kill_group(proc)
    ray_stop()
    kill_marked(marker)
    out.seek(0)
    text = out.read()
    own = {}
    for line in text.splitlines():
        m = OWN_LINE.match(line.strip())
        if m:
            own[m.group(1)] = (float(m.group(2)), float(m.group(3)))
    if proc.returncode not in (0, None) and status == "ok":
        status = f"exit {proc.returncode}: {text.strip()[-400:]}"
    log(f"Ray's own: {len(own)} rows, {time.time() - t:.0f} s, {status}")
    return own, {"label": label, "status": status, "wall_s": time.time() - t}


# ---- the table ------------------------------------------------------------------------------


def fmt_rate(r):
    if r is None:
        return "—"
    if r["status"] != "ok":
        return f"**{r['status']}**"
    v = r["rate"]
    s = f"{v:,.0f}" if v >= 100 else f"{v:,.2f}"
    return f"{s} ± {r['sd'] / v * 100:.0f} %" if v and r["sd"] else s


def row_label(name, args):
    if name == "extra: actors created and ready":
        return f"extra: {args.actors} actors created and ready (Actor of ray_perf.py)"
    if name == "extra: array read by readers":
        return (f"extra: {args.array_bytes / (1 << 30):g} GiB NumPy array put, read by "
                f"{args.readers} actors (checksum)")
    if name == "extra: call to N actors, gathered":
        return (f"extra: one call to each of {args.fanout} actors, gathered (Monarch: "
                "mesh.call().get())")
    if name == MEMORY_ROW:
        return f"extra: PSS of the cluster's processes, idle with {args.mem_actors} actors"
    return name


def table(rows, res, own, args):
    mon = "monarch" in res
    out = ["| row | unit | Ray | troupe.ray | troupe.ray / Ray | Ray's own script | Ray ours / own |"
           + (" Monarch 0.7.0 | troupe.ray / Monarch |" if mon else ""),
           "|---|---|---|---|---|---|---|" + ("---|---|" if mon else "")]
    for name in rows:
        ray_r, tr_r = res.get("ray", {}).get(name), res.get("troupe", {}).get(name)
        unit = next((r["unit"] for r in (ray_r, tr_r) if r and r.get("status") == "ok"), "/s")
        ratio = "—"
        if ray_r and tr_r and ray_r["status"] == tr_r["status"] == "ok" and ray_r["rate"]:
            ratio = f"{tr_r['rate'] / ray_r['rate']:.2f}×"
            if name == MEMORY_ROW:
                ratio += " (lower is better)"
        own_s, own_ratio = "—", "—"
        if name in own:
            own_s = f"{own[name][0]:,.2f}" if own[name][0] < 100 else f"{own[name][0]:,.0f}"
            if ray_r and ray_r["status"] == "ok" and own[name][0]:
                own_ratio = f"{ray_r['rate'] / own[name][0]:.2f}"
        elif name.startswith("extra"):
            own_s = "not in ray_perf.py"
        line = (f"| {row_label(name, args)} | {unit} | {fmt_rate(ray_r)} | {fmt_rate(tr_r)} "
                f"| {ratio} | {own_s} | {own_ratio} |")
        if mon:
            m_r = res["monarch"].get(name)
            m_ratio = "—"
            if m_r and tr_r and m_r["status"] == tr_r["status"] == "ok" and m_r["rate"]:
                m_ratio = f"{tr_r['rate'] / m_r['rate']:.2f}×"
            line += f" {fmt_rate(m_r)} | {m_ratio} |"
        out.append(line)
    errors = []
    for system in ("ray", "troupe", "monarch"):
        for name in rows:
            r = res.get(system, {}).get(name)
            if r and r["status"] != "ok":
                errors.append(f"- {system}, {name}: {r['status']}: {r.get('error', '')[:700]}")
    return out, errors


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--quick", action="store_true", default=os.environ.get("QUICK") == "1",
                   help="short rows: no sleep, 0.25 s warm-up, 4 rounds of 0.5 s (env QUICK=1)")
    p.add_argument("--skip-ray-own", action="store_true", help="do not run Ray's own script")
    p.add_argument("--own-client", action="store_true",
                   help="--quick: also run Ray's own Ray Client rows (full mode always does)")
    p.add_argument("--systems", default="ray,troupe")
    p.add_argument("--rows", default="", help="only rows containing one of these substrings "
                   "(comma-separated)")
    p.add_argument("--row-timeout", type=float, default=None, help="s (quick 150, full 600)")
    p.add_argument("--init-timeout", type=float, default=180)
    p.add_argument("--own-timeout", type=float, default=None, help="s (quick 900, full 2400)")
    p.add_argument("--sleep", type=float, default=None, help="timeit's sleep (quick 0, full 10)")
    p.add_argument("--warmup", type=float, default=None, help="s (default: half of --round-s, as Ray's 1 s to 2 s)")
    p.add_argument("--rounds", type=int, default=4)
    p.add_argument("--round-s", type=float, default=None, help="s (quick 0.5, full 2)")
    p.add_argument("--actors", type=int, default=64, help="actors created and ready")
    p.add_argument("--mem-actors", type=int, default=64, help="actors of the memory row")
    p.add_argument("--fanout", type=int, default=8, help="actors of the call-to-N row")
    p.add_argument("--monarch-python", default="/tmp/monarch-venv/bin/python",
                   help="a python with torchmonarch; its rows run when it exists")
    p.add_argument("--skip-monarch", action="store_true")
    p.add_argument("--array-gib", type=float, default=1.0)
    p.add_argument("--readers", type=int, default=8)
    p.add_argument("--reps", type=int, default=None, help="repetitions of the extra rows "
                   "(quick 2, full 5)")
    p.add_argument("--json", default="", help="write every result here")
    p.add_argument("--out", default="", help="write the table here too")
    args = p.parse_args()

    q = args.quick
    args.row_timeout = args.row_timeout or (150 if q else 600)
    args.own_timeout = args.own_timeout or (900 if q else 2400)
    args.sleep = args.sleep if args.sleep is not None else (0.0 if q else 10.0)
    args.round_s = args.round_s if args.round_s is not None else (0.5 if q else 2.0)
    args.warmup = args.warmup if args.warmup is not None else args.round_s / 2  # Ray's 1:2
    args.reps = args.reps or (2 if q else 5)
    args.array_bytes = int(args.array_gib * (1 << 30)) // 8 * 8
    args.child_args = ["--sleep", str(args.sleep), "--warmup", str(args.warmup), "--rounds",
                       str(args.rounds), "--round-s", str(args.round_s), "--actors",
                       str(args.actors), "--mem-actors", str(args.mem_actors), "--fanout", str(args.fanout), "--array-bytes",
                       str(args.array_bytes), "--readers", str(args.readers), "--reps",
                       str(args.reps)]
    for path in (RAY_PY, os.path.join(PEERS, ".troupe-peers-stamp")):
        if not os.path.exists(path):
            sys.exit(f"{path} is missing: the peers venv (scripts/peers-setup.sh) is not ready")
    rows = [MEMORY_ROW] + PERF_ROWS + EXTRA_ROWS
    if args.rows:
        pats = [s.strip() for s in args.rows.split(",") if s.strip()]
        rows = [r for r in rows if any(s in r for s in pats)]
    marker = f"SBS_RUN={os.getpid()}-{int(time.time())}"
    started = time.time()
    own, own_info = {}, None
    if not args.skip_ray_own:
        own, own_info = run_ray_own(args, marker)
    res, infos = {}, {}
    systems = [s.strip() for s in args.systems.split(",") if s.strip()]
    if (not args.skip_monarch and "monarch" not in systems
            and os.path.exists(args.monarch_python)):
        systems.append("monarch")
    for system in systems:
        mine = [r for r in rows if system != "monarch" or r in MONARCH_ROWS]
        log(f"{system}: {len(mine)} rows")
        if mine:
            res[system], infos[system] = run_system(system, mine, args, marker)
    left = marked_pids(marker)
    ray_left = ray_processes()

    lines, errors = table(rows, res, own, args)
    mode = (f"{'quick' if q else 'full'}: timeit with a {args.sleep:g} s sleep, {args.warmup:g} "
            f"s warm-up, {args.rounds} rounds of {args.round_s:g} s; extra rows "
            f"{args.reps} repetitions")
    head = [f"Mode: {mode}. Rates are per second (mean ± sd over the rounds); "
            "troupe.ray / Ray > 1 means troupe.ray is faster (for the PSS row, larger)."]
    if own_info:
        head.append(f"Ray's own script: {own_info['label']} ({own_info['status']}, "
                    f"{own_info['wall_s']:.0f} s).")
    for system, info in infos.items():
        head.append(f"{system}: ray.init {', '.join(f'{s:.1f}' for s in info['inits'])} s; "
                    f"processes left after its part and killed: {info['leftovers']}.")
    head.append(f"After the run: {len(left)} processes with this run's marker, "
                f"{len(ray_left)} Ray processes (ps); total {time.time() - started:.0f} s.")
    text = "\n".join(head + [""] + lines)
    if errors:
        text += "\n\nFailed rows:\n" + "\n".join(errors)
    text += "\n\nRows of Ray's microbenchmark that rest on Ray internals (not run on either):\n"
    text += "\n".join(f"- {name}: {why}" for name, why in OUT_OF_SCOPE)
    own_only = [k for k in own if k not in rows]
    if own_only:
        text += "\n\nRay's own script's other rows (not in the table):\n" + "\n".join(
            f"- {k}: {own[k][0]:,.2f} ± {own[k][1]:,.2f} /s" for k in own_only)
    mem = {s: res.get(s, {}).get(MEMORY_ROW) for s in res}
    mem_lines = []
    for s, r in mem.items():
        if r and r.get("status") == "ok":
            b, a = r["before"], r["after"]
            top = ", ".join(f"{k} ×{v[0]} {v[1]:.0f}" for k, v in list(a["by_name"].items())[:6])
            mem_lines.append(f"- {s}: {b['pss_mib']:.0f} MiB PSS in {b['processes']} processes "
                             f"idle after init, {a['pss_mib']:.0f} MiB in {a['processes']} with "
                             f"{r['n']} actors ({(a['pss_mib'] - b['pss_mib']) / r['n']:.1f} MiB "
                             f"per actor; {r['ready_s']:.1f} s to ready); driver "
                             f"{a['driver_pss_mib']:.0f} MiB, not included. Largest (MiB): {top}")
    if mem_lines:
        text += "\n\nMemory (PSS from /proc/PID/smaps_rollup):\n" + "\n".join(mem_lines)
    print(text, flush=True)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"results": res, "own": own, "own_info": own_info, "infos": infos,
                       "mode": mode}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

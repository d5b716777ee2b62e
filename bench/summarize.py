"""Writes the issue-10 side-by-side table (markdown) from one bench/run_all.sh output directory.

    /usr/bin/python3 bench/summarize.py OUT_DIR > OUT_DIR/summary.md

Reads the Google Benchmark JSON files (medians of the repetitions; the single run for startup
and death, which run fixed iterations), the RATIO/PEER lines of data_plane_bench,
multihost_bench and python_bench, and machine.txt (commit, date, load). Every figure in a row
was measured in the same run of bench/run_all.sh; Ray's figures are published ones.
A missing measurement reads "not run".
"""

import json
import os
import re
import sys

OUT = sys.argv[1] if len(sys.argv) > 1 else "build-bench/bench-results"

RAY_CALLS = 8664  # Ray's published pipelined no-op task rate (tasks/s), not measured here
RAY_PG = 765  # Ray's published placement group create+remove rate (/s), not measured here


def read(name):
    try:
        with open(os.path.join(OUT, name)) as f:
            return f.read()
    except OSError:
        return ""


def gbench(name):
    """{function name: (real time in ns, items/s)}: medians when repeated, else the run."""
    text = read(name + ".json")
    if not text:
        return {}
    scale = {"ns": 1, "us": 1e3, "ms": 1e6, "s": 1e9}
    runs, medians = {}, {}
    for b in json.loads(text).get("benchmarks", []):
        if b.get("error_occurred"):
            continue
        fn = b.get("run_name", b["name"]).split("/")[0]
        val = (b["real_time"] * scale[b.get("time_unit", "ns")], b.get("items_per_second", 0))
        if b.get("run_type") == "aggregate":
            if b.get("aggregate_name") == "median":
                medians[fn] = val
        else:
            runs.setdefault(fn, val)
    runs.update(medians)
    return runs


def num(pattern, text, cast=float):
    m = re.search(pattern, text)
    return cast(m.group(1)) if m else None


def ms(ns):
    return "not run" if ns is None else f"{ns / 1e6:,.1f} ms"


def us(ns):
    return "not run" if ns is None else f"{ns / 1e3:,.1f} µs"


def rate(r):
    return "not run" if not r else f"{r:,.0f}/s"


def yes(ok):
    return "not run" if ok is None else ("**yes**" if ok else "**no**")


def main():
    machine = read("machine.txt")
    cl, tp, st, cp = (gbench(n) for n in
                      ("call_latency_bench", "throughput_bench", "startup_bench",
                       "control_plane_bench"))
    dp, mh, py = read("data_plane_bench.txt"), read("multihost_bench.txt"), read("python_bench.txt")
    rows = []

    # 1. 1 GiB to 8 workers, one host.
    size = num(r"data plane, one host: ([\d.]+) GiB", dp)
    t = num(r"troupe 8 workers, all checksums back\s+([\d.]+) ms", dp)
    mc = num(r"memcpy, pre-faulted destination\s+([\d.]+) ms", dp)
    shm = num(r"shm-8 \(8 mmap readers \+ checksum\)\s+([\d.]+) ms", dp)
    shw = num(r"shm-write \(file written once, apart\)\s+([\d.]+) ms", dp)
    label = f"{size:.3g} GiB" if size else "DATA_BYTES"
    rows.append((f"{label} replicated to 8 workers, one host, until all returned a checksum",
                 f"{t:,.1f} ms" if t else "not run",
                 f"one memcpy (pre-faulted dst) {mc:,.1f} ms; 8 /dev/shm mmap readers {shm:,.1f} ms"
                 f" (+ the file's one write {shw:,.1f} ms, not included)" if t else "not run",
                 f"{t / mc:.2f}× memcpy; {t / shm:.2f}× shm readers" if t else "—",
                 "≤ 1.5× one memcpy", yes(t / mc <= 1.5 if t else None)))
    rss = num(r"RSS driver peak above baseline during replication: ([\d.]+) x", dp)
    rows.append((f"driver peak RSS above baseline, {label} to 8 workers",
                 f"{rss:.2f}× the data" if rss is not None else "not run",
                 "baseline: driver RSS before the data was allocated (1.00× = the data itself)",
                 "—", "at most one copy (≤ 1.10× allowing 10 % for the driver's own growth)",
                 yes(rss <= 1.10 if rss is not None else None)))

    # 2. Two hosts.
    m = re.search(r"data plane over 2 hosts: ([\d.]+) GiB to 8 workers \(4 per host\) in (\d+) ms"
                  r".*bytes sent between hosts ([\d.]+) GiB = ([\d.]+) x the data", mh)
    if m:
        g, tm, sent, x = float(m.group(1)), m.group(2), float(m.group(3)), float(m.group(4))
        rows.append((f"{g:.3g} GiB replicated to 8 workers on 2 hosts (netns)",
                     f"{sent:.3f} GiB between hosts ({x:.2f}× the data); {int(tm):,} ms",
                     "—", f"{x / 2:.2f}× the limit", "bytes between hosts ≤ 2× the data",
                     yes(x <= 2.0)))
    else:
        skipped = "skipped" in mh or not mh
        rows.append(("1 GiB replicated to 8 workers on 2 hosts (netns)",
                     "not run (needs root)" if skipped else "failed: see raw output", "—", "—",
                     "bytes between hosts ≤ 2× the data", "not run"))

    # 3. 64 workers ready.
    s64 = st.get("BM_Start64Workers", (None, 0))[0]
    peers = {k: v[0] for k, v in st.items() if k != "BM_Start64Workers"}
    true64 = peers.get("BM_ForkExecTrue64")
    desc = "; ".join(f"{k.removeprefix('BM_')} {ms(v)}" for k, v in sorted(peers.items()))
    non_floor = {k: v for k, v in peers.items()
                 if k not in ("BM_ForkExecTrue64", "BM_ForkExecSelf64")}
    ok = None
    if s64 and true64:
        ok = s64 <= 1.5 * true64 and all(s64 < v for v in non_floor.values())
    rows.append(("64 workers ready (2 embedded hosts, until each answered a call)", ms(s64),
                 desc or "not run",
                 f"{s64 / true64:.2f}× fork+exec /bin/true" if s64 and true64 else "—",
                 "≤ 1.5× fork+exec of /bin/true; faster than every peer"
                 + ("" if non_floor else " (peers not in startup_bench on this commit)"), yes(ok)))

    # 4. Round trip.
    rt = cl.get("BM_NoopCallRoundTrip", (None,))[0]
    sock = cl.get("BM_UnixSocketPingPong", (None,))[0]
    zmq = cl.get("BM_ZmqReqRepPingPong", (None,))[0]
    pipe = num(r"PEER python_pipe_round_trip_us ([\d.]+)", py)
    pyrt = num(r"PEER python_troupe_round_trip_us ([\d.]+)", py)
    rows.append(("no-op round trip (C++ driver, 1 worker)", us(rt),
                 f"Unix-socket ping-pong {us(sock)}; ZeroMQ REQ/REP {us(zmq) if zmq else 'skipped'}; "
                 f"multiprocessing.Pipe {pipe:.1f} µs" if pipe else
                 f"Unix-socket ping-pong {us(sock)}; ZeroMQ REQ/REP {us(zmq) if zmq else 'skipped'}",
                 f"{rt / sock:.2f}× socket" + (f"; {rt / zmq:.2f}× ZeroMQ" if zmq else "")
                 if rt and sock else "—", "≤ 1.2× the socket floor",
                 yes(rt / sock <= 1.2 if rt and sock else None)))
    if pyrt and pipe:
        rows.append(("no-op round trip (Python driver, Python worker)", f"{pyrt:.1f} µs",
                     f"multiprocessing.Pipe {pipe:.1f} µs", f"{pyrt / pipe:.2f}× Pipe",
                     "— (not an issue-10 row)", "—"))

    # 5. Pipelined.
    p1 = tp.get("BM_PipelinedNoop1Worker", (0, 0))[1]
    p8 = tp.get("BM_PipelinedNoop8Workers", (0, 0))[1]
    batched = tp.get("BM_UnixSocketPipelinedBatched", (0, 0))[1]
    pool1 = num(r"PEER python_pool1_apply_async_per_s (\d+)", py)
    pool8 = num(r"PEER python_pool8_apply_async_per_s (\d+)", py)
    ray = f"Ray {RAY_CALLS:,}/s (published, not measured here)"
    rows.append(("pipelined no-op calls/s, 1 worker", rate(p1),
                 f"batched socket floor {rate(batched)}; Pool(1).apply_async {rate(pool1)}; {ray}",
                 (f"{p1 / batched:.2f} of socket; {p1 / pool1:.1f}× Pool; {p1 / RAY_CALLS:.1f}× Ray"
                  if p1 and batched and pool1 else "—"), "≥ 150,000/s",
                 yes(p1 >= 150000 if p1 else None)))
    rows.append(("pipelined no-op calls/s, 8 workers (2 embedded hosts)", rate(p8),
                 f"Pool(8).apply_async {rate(pool8)}; {ray}",
                 f"{p8 / pool8:.1f}× Pool; {p8 / RAY_CALLS:.1f}× Ray" if p8 and pool8 else "—",
                 "— (150,000/s is for 1 worker)", "—"))

    # 5b. The timeline's recording overhead (issue 21): the same calls with recording on and off,
    # two 1-host clusters side by side in the same run.
    for what, on_name, off_name in (
            ("1 worker, `w.call`", "BM_TimelineOnCalls", "BM_TimelineOffCalls"),
            ("group of 2, `run_all_workers_single_data`", "BM_TimelineOnGroup",
             "BM_TimelineOffGroup")):
        on = tp.get(on_name, (0, 0))[1]
        off = tp.get(off_name, (0, 0))[1]
        rows.append((f"timeline recording overhead, pipelined no-op calls/s, {what}", rate(on),
                     f"recording off {rate(off)}",
                     f"{on / off:.3f} of off ({off / on:.3f}× slower)" if on and off else "—",
                     "≤ 1.05× slower (≥ 0.952 of off)",
                     yes(off / on <= 1.05 if on and off else None)))

    # 6. Placement groups. Like with like: Ray's published rate is a driver creating groups
    # through Ray's GCS server over gRPC, so the row set against it is troupe's driver through a
    # standing head over TCP. The embedded head (a function call, no network) has its own row,
    # against an in-memory floor only.
    pg = cp.get("BM_PlacementGroupCreateRemove", (0, 0))[1]
    lmap = cp.get("BM_LockedMapInsertErase", (0, 0))[1]
    pgmh = num(r"placement group create\+remove through the head over TCP: (\d+) /s", mh)
    rows.append(("placement group create+remove per second, driver to a standing head over TCP"
                 " (netns)", rate(pgmh),
                 f"Ray {RAY_PG}/s (published, not measured here: driver to Ray's GCS over gRPC)",
                 f"{pgmh / RAY_PG:.1f}× Ray" if pgmh else "—", "≥ 10,000/s",
                 yes(pgmh >= 10000 if pgmh else None)))
    rows.append(("placement group create+remove per second, in-process (embedded head, no RPC)",
                 rate(pg), f"locked std::map insert+erase {rate(lmap)}",
                 f"{pg / lmap:.3f} of the map" if pg and lmap else "—",
                 "— (no network: not comparable with Ray's figure)", "—"))

    commit = num(r"commit: (.*)", machine, str) or "unknown"
    date = num(r"date: (\S+)", machine, str) or "?"
    loads = re.findall(r"load average ([\d.]+) [\d.]+ [\d.]+", machine)
    busy = re.findall(r"CPUs busy before the run: (\d+)%", machine)
    print(f"Measured at commit {commit}, {date}, by `bash bench/run_all.sh`. Before each binary,"
          f" CPUs busy with other processes: {', '.join(b + ' %' for b in busy) or '?'};"
          f" 1-minute load average: {', '.join(loads) or '?'}.\n")
    print("| measurement | troupe | floor / peers, same run | ratio | target | met? |")
    print("|---|---|---|---|---|---|")
    for r in rows:
        print("| " + " | ".join(r) + " |")


if __name__ == "__main__":
    main()

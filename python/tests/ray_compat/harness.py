"""Runs the differential corpus: each program of programs/ is a plain Ray program (`import ray`)
that prints what a user sees; it runs on real Ray (the peers venv, scripts/peers-setup.sh) and on
troupe.ray (troupe.ray.install() before the program's `import ray`), and the two observations
must be equal.

An observation is {"rc": exit status, "stdout": [lines]}, plus "stderr_last" (the last line of
stderr: an uncaught exception's type and message) for a program whose header asks for it.
Header lines of a program (comments at its top):

  # compare: stderr_last      also compare the last line of stderr
  # timeout: SECONDS          per run (default 60)
  # xfail: REASON             expected to differ on troupe.ray until REASON is fixed (strict)

Ray's observations are recorded in expected/NAME.json by running the program on Ray
(`python3 harness.py --record [NAME...]`), never written by hand; CI compares troupe.ray with
them, and with a live Ray run when the venv exists. Other modes:

  python3 harness.py [--troupe] [NAME...]   troupe.ray against the recordings
  python3 harness.py --live [NAME...]       troupe.ray against live Ray (and the recordings)
"""

import json
import os
import re
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
PROGRAMS = os.path.join(HERE, "programs")
EXPECTED = os.path.join(HERE, "expected")
REPO = os.path.dirname(os.path.dirname(os.path.dirname(HERE)))
RAY_PYTHON = os.path.join(REPO, ".venv-peers", "bin", "python")
RAY_VERSION = "2.60.0"

# Runs a program on troupe.ray: install() first, then the program as __main__.
_TROUPE_BOOT = ("import sys, runpy; import troupe.ray; troupe.ray.install(); "
                "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')")
# Lines the runtimes add to a driver's stdout (a worker's forwarded prints, Ray's notices).
_NOISE = re.compile(r"^(\(\S+ pid=\d+[^)]*\)|\(raylet\)|\[\d{4}-\d\d-\d\d "
                    r"|\d{4}-\d\d-\d\d \d\d:\d\d:\d\d)")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
# Runs a program on Ray with every line Ray itself prints for its workers and raylet (worker
# logs, retry notices, tracebacks of retried tasks) sent to stderr, so that stdout holds only
# what the program prints.
_RAY_BOOT = ("import sys, runpy; import ray._private.worker as w; p = w.print_to_stdstream; "
             "w.print_to_stdstream = lambda data, ignore_prefix: p(dict(data, is_err=True), "
             "ignore_prefix); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], "
             "run_name='__main__')")


def _noise(line):
    return bool(_NOISE.match(_ANSI.sub("", line)))


def names():
    return sorted(f[:-3] for f in os.listdir(PROGRAMS) if f.endswith(".py")
                  and not f.startswith("_"))


def header(name):
    """The program's header directives: {"compare": [...], "timeout": s, "xfail": reason}."""
    out = {"compare": [], "timeout": 60.0, "xfail": None}
    with open(os.path.join(PROGRAMS, name + ".py")) as f:
        for line in f:
            m = re.match(r"#\s*(compare|timeout|xfail):\s*(.*)", line.strip())
            if not m:
                if line.strip() and not line.startswith("#"):
                    break
                continue
            key, value = m.groups()
            if key == "compare":
                out["compare"] += value.split()
            elif key == "timeout":
                out["timeout"] = float(value)
            else:
                out["xfail"] = value.strip()
    return out


def ray_available():
    return os.path.exists(RAY_PYTHON)


def _env(system):
    env = dict(os.environ)
    env.pop("PYTHONPATH", None)
    if system == "troupe":
        env["PYTHONPATH"] = os.environ.get("TROUPE_RAY_COMPAT_PYTHONPATH") or \
            os.path.join(REPO, "build", "python")
    else:
        env.update(RAY_USAGE_STATS_ENABLED="0", RAY_DEDUP_LOGS="0",
                   RAY_ENABLE_UV_RUN_RUNTIME_ENV="0")
    env["PYTHONHASHSEED"] = "0"
    return env


def run(name, system, timeout=None):
    """The observation of program `name` on `system` ("ray" or "troupe") and its seconds."""
    info = header(name)
    path = os.path.join(PROGRAMS, name + ".py")
    if system == "ray":
        argv = [RAY_PYTHON, "-c", _RAY_BOOT, path]
    else:
        argv = [os.environ.get("TROUPE_RAY_COMPAT_PYTHON", "/usr/bin/python3"), "-c",
                _TROUPE_BOOT, path]
    start = time.monotonic()
    # A session of its own: whatever the program leaves behind is found by its session id.
    p = subprocess.Popen(argv, env=_env(system), cwd=PROGRAMS, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True, stdin=subprocess.DEVNULL,
                         start_new_session=True)
    try:
        stdout, stderr = p.communicate(timeout=timeout or info["timeout"])
        rc = p.returncode
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, 9)
        stdout, stderr = p.communicate()
        rc = "timeout"
    took = time.monotonic() - start
    left = leftovers(p.pid)
    obs = {"rc": rc, "stdout": [ln for ln in stdout.splitlines() if not _noise(ln)]}
    if "stderr_last" in info["compare"]:
        lines = [ln for ln in stderr.splitlines() if ln.strip() and not _noise(ln)]
        obs["stderr_last"] = lines[-1] if lines else ""
    obs_full = dict(obs, _stderr=stderr[-4000:], _left=left)
    return obs_full, took


def _session_members(sid):
    out = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            if int(fields[3]) != sid or fields[0] == "Z":  # state, ppid, pgrp, session
                continue
            with open(f"/proc/{entry}/comm") as f:
                out.append((int(entry), f.read().strip()))
        except OSError:
            continue
    return out


def leftovers(sid, grace=15.0):
    """The processes of the program's session still running `grace` seconds after it ended
    (Ray's daemons end shortly after their driver), killed then. Returns their names."""
    deadline = time.monotonic() + grace
    members = _session_members(sid)
    while members and time.monotonic() < deadline:
        time.sleep(0.1)
        members = _session_members(sid)
    for pid, _ in members:
        try:
            os.kill(pid, 9)
        except (ProcessLookupError, PermissionError):
            pass
    return sorted(name for _, name in members)


def public(obs):
    return {k: v for k, v in obs.items() if not k.startswith("_")}


def expected(name):
    """Ray's recorded observation of `name`, or None."""
    try:
        with open(os.path.join(EXPECTED, name + ".json")) as f:
            return json.load(f)["observation"]
    except FileNotFoundError:
        return None


def record(name):
    obs, took = run(name, "ray")
    os.makedirs(EXPECTED, exist_ok=True)
    with open(os.path.join(EXPECTED, name + ".json"), "w") as f:
        json.dump({"program": f"programs/{name}.py", "peer": f"ray {RAY_VERSION}",
                   "recorded_by": "python/tests/ray_compat/harness.py --record",
                   "observation": public(obs)}, f, indent=1)
        f.write("\n")
    return obs, took


def diff(a, b):
    """A readable difference between two observations ("" when equal)."""
    a, b = public(a), public(b)
    if a == b:
        return ""
    out = []
    for key in sorted(set(a) | set(b)):
        if a.get(key) == b.get(key):
            continue
        if key == "stdout":
            la, lb = a.get(key) or [], b.get(key) or []
            for i in range(max(len(la), len(lb))):
                x = la[i] if i < len(la) else "<none>"
                y = lb[i] if i < len(lb) else "<none>"
                if x != y:
                    out.append(f"  stdout line {i + 1}:\n    ray:    {x}\n    troupe: {y}")
        else:
            out.append(f"  {key}: ray {a.get(key)!r}, troupe {b.get(key)!r}")
    return "\n".join(out)


def main(argv):
    mode = "troupe"
    if argv and argv[0] in ("--record", "--live", "--troupe"):
        mode, argv = argv[0][2:], argv[1:]
    chosen = argv or names()
    totals = {"ray": 0.0, "troupe": 0.0}
    bad = 0
    for name in chosen:
        if mode == "record":
            obs, took = record(name)
            totals["ray"] += took
            print(f"{name:40s} recorded ({took:.1f} s, rc {obs['rc']})", flush=True)
            continue
        want = expected(name)
        if mode == "live":
            want, took = run(name, "ray")
            totals["ray"] += took
            if public(want) != expected(name):
                print(f"{name}: the recording differs from live Ray", flush=True)
        got, took = run(name, "troupe")
        totals["troupe"] += took
        d = "no recording" if want is None else diff(want, got)
        tag = "xfail" if header(name)["xfail"] else "DIFF"
        print(f"{name:40s} {'ok' if not d else tag} ({took:.1f} s)", flush=True)
        if d:
            bad += tag == "DIFF"
            print(d)
            if got.get("_stderr"):
                print("  troupe stderr tail:\n    " +
                      "\n    ".join(got["_stderr"].splitlines()[-8:]))
    print(f"total: ray {totals['ray']:.1f} s, troupe.ray {totals['troupe']:.1f} s")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

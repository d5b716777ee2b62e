"""Named and detached actors shared by the drivers of a standing cluster (Ray's semantics), with
each driver a process of its own against the real `troupe start` head and agent of
test_standing's fixture: driver 1 creates a detached and a plain named actor and sets state;
driver 2 finds both while driver 1 lives; once driver 1 exited, driver 3 finds the detached one
with its state, calls it, gets it again through get_if_exists, cannot take its name, sees the
plain one's name freed, kills the detached one (its process ends, its name is free)."""

import json
import os
import subprocess
import sys
import textwrap

import troupe

from test_standing import standing  # noqa: F401 - the fixture

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(troupe.__file__)))

_PRELUDE = """
import json, os, sys, time
from troupe import ray
import ray_workers as w
def report(**kv):
    print("REPORT " + json.dumps(kv), flush=True)
"""

DRIVER_1 = _PRELUDE + """
ray.init(address="auto", namespace="ns1")
det = w.Counter.options(name="det", lifetime="detached").remote(10)
plain = w.Counter.options(name="plain").remote(1)
report(det=ray.get(det.add.remote(5), timeout=60), det_pid=ray.get(det.pid.remote(), timeout=60),
       plain=ray.get(plain.get.remote(), timeout=60))
sys.stdin.readline()  # the test says when to exit
ray.shutdown()
"""

DRIVER_2 = _PRELUDE + """
ray.init(address="auto")  # another namespace: ns1 is named explicitly
det = ray.get_actor("det", namespace="ns1")
plain = ray.get_actor("plain", namespace="ns1")
report(det=ray.get(det.get.remote(), timeout=60), plain=ray.get(plain.get.remote(), timeout=60))
ray.shutdown()
"""

DRIVER_3 = _PRELUDE + """
ray.init(address="auto", namespace="ns1")
det = ray.get_actor("det")
out = {"state": ray.get(det.get.remote(), timeout=60), "add": ray.get(det.add.remote(1), timeout=60),
       "pid": ray.get(det.pid.remote(), timeout=60)}
again = w.Counter.options(name="det", get_if_exists=True).remote(0)
out["again_pid"] = ray.get(again.pid.remote(), timeout=60)
out["again_state"] = ray.get(again.get.remote(), timeout=60)
try:
    w.Counter.options(name="det").remote(0)
    out["duplicate"] = "created"
except ValueError as e:
    out["duplicate"] = str(e)
# The plain actor's name goes with driver 1's connection to the head: poll with a deadline.
deadline = time.monotonic() + 20
while True:
    try:
        ray.get_actor("plain")
    except ValueError as e:
        out["plain"] = str(e)
        break
    if time.monotonic() > deadline:
        out["plain"] = "still there"
        break
    time.sleep(0.05)
ray.kill(det)
try:
    ray.get_actor("det")
    out["after_kill"] = "found"
except ValueError as e:
    out["after_kill"] = str(e)
try:
    ray.get(det.get.remote(), timeout=30)
    out["call_after_kill"] = "answered"
except ray.exceptions.RayActorError as e:
    out["call_after_kill"] = type(e).__name__
fresh = w.Counter.options(name="det").remote(100)
out["fresh"] = ray.get(fresh.get.remote(), timeout=60)
report(**out)
ray.shutdown()
"""


def _env(address, token):
    env = dict(os.environ, TROUPE_ADDRESS=address, TROUPE_TOKEN=token)
    env["PYTHONPATH"] = os.pathsep.join([_PACKAGE, _HERE, env.get("PYTHONPATH", "")])
    return env


def _start(code, env):
    return subprocess.Popen([sys.executable, "-c", textwrap.dedent(code)], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)


def _report(proc):
    """The driver's REPORT line (read as it comes); its output on failure."""
    seen = []
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("REPORT "):
            return json.loads(line[len("REPORT "):])
    proc.wait(10)
    raise AssertionError(f"no report (exit {proc.returncode}):\n{''.join(seen)}\n"
                         f"{proc.stderr.read()}")


def _run(code, env):
    proc = _start(code, env)
    try:
        report = _report(proc)
        assert proc.wait(60) == 0, proc.stderr.read()
        return report
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_named_detached_actor_across_drivers(standing):  # noqa: F811
    address, token = standing
    env = _env(address, token)
    driver1 = _start(DRIVER_1, env)
    try:
        first = _report(driver1)
        assert first == {"det": 15, "det_pid": first["det_pid"], "plain": 1}
        # While driver 1 lives, another driver finds both names.
        assert _run(DRIVER_2, env) == {"det": 15, "plain": 1}
        driver1.stdin.write("exit\n")
        driver1.stdin.flush()
        assert driver1.wait(60) == 0, driver1.stderr.read()
    finally:
        if driver1.poll() is None:
            driver1.kill()
            driver1.wait()
    # The detached actor outlived its driver.
    assert _alive(first["det_pid"])
    out = _run(DRIVER_3, env)
    assert out["state"] == 15 and out["add"] == 16
    assert out["pid"] == first["det_pid"]
    assert out["again_pid"] == first["det_pid"] and out["again_state"] == 16
    assert "The name det (namespace=ns1) is already taken" in out["duplicate"]
    assert "Failed to look up actor with name 'plain' in namespace 'ns1'" in out["plain"]
    assert "Failed to look up actor with name 'det'" in out["after_kill"]
    assert out["call_after_kill"] == "ActorDiedError"
    assert out["fresh"] == 100
    # ray.kill stopped the process (the agent answered the stop once it was reaped).
    assert not _alive(first["det_pid"])

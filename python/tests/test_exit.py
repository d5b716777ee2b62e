"""A driver that ends without shutdown(), as most Ray programs do, exits as Python does (0, or 1
with the traceback of an uncaught exception) and leaves no worker behind, with calls and tasks
still in flight. Each program runs in its own interpreter."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))


def _run(source, timeout=120):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([p for p in sys.path if p] + [HERE])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(source)], env=env,
                          capture_output=True, text=True, timeout=timeout,
                          stdin=subprocess.DEVNULL)


def _pids_of(stdout):
    return [int(x) for line in stdout.splitlines() if line.startswith("pids ")
            for x in line.split()[1:]]


def _all_gone(pids, timeout=30):
    """Waits for every pid to exit (the positive signal: kill(pid, 0) fails); returns those
    still alive after `timeout`."""
    deadline = time.monotonic() + timeout
    alive = list(pids)
    while alive and time.monotonic() < deadline:
        alive = [p for p in alive if _alive(p)]
        if alive:
            time.sleep(0.05)
    return alive


def _alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:  # a zombie has exited
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


RAY_PENDING_TASKS = """
    import os, time
    import troupe.ray; troupe.ray.install()
    import ray
    ray.init(num_cpus=2)

    @ray.remote
    def f(x):
        time.sleep(0.2)
        return x + 1

    @ray.remote
    def pid():
        return os.getpid()

    print("pids", *set(ray.get([pid.remote() for _ in range(4)])), flush=True)
    refs = [f.remote(i) for i in range(10)]
    print(ray.get(refs[0]))
    {ending}
"""


def test_ray_program_with_pending_tasks_and_no_shutdown_exits_zero():
    out = _run(RAY_PENDING_TASKS.format(ending="# ends here, 9 tasks still queued or running"))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "1"
    assert "terminate called" not in out.stderr
    pids = _pids_of(out.stdout)
    assert pids and _all_gone(pids) == []


def test_ray_uncaught_exception_after_tasks_is_pythons_traceback_and_exit_1():
    out = _run(RAY_PENDING_TASKS.format(ending="raise ValueError('boom')"))
    assert out.returncode == 1, out.stderr
    assert out.stderr.rstrip().splitlines()[-1] == "ValueError: boom"
    assert "Traceback (most recent call last)" in out.stderr
    assert "terminate called" not in out.stderr
    assert _all_gone(_pids_of(out.stdout)) == []


def test_ray_actor_calls_in_flight_at_exit():
    out = _run("""
        import troupe.ray; troupe.ray.install()
        import ray
        ray.init(num_cpus=2)

        @ray.remote
        class Slow:
            def pid(self):
                import os
                return os.getpid()

            def nap(self, s):
                import time
                time.sleep(s)
                return s

        a = Slow.remote()
        print("pids", ray.get(a.pid.remote()), flush=True)
        refs = [a.nap.remote(0.3) for _ in range(5)]
        print("submitted")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "submitted"
    assert "terminate called" not in out.stderr
    assert _all_gone(_pids_of(out.stdout)) == []


def test_native_cluster_with_calls_in_flight_and_no_shutdown_exits_zero():
    out = _run("""
        import troupe
        c = troupe.Cluster(num_hosts=1)
        r = c.start_worker("workers.Rank", env={"RANK": "0"})
        w = c.start_worker("workers.Echo")
        print("pids", r.call("pid").result(60), flush=True)
        futures = [w.call("spin", seconds=0.3) for _ in range(4)]
        futures[0].add_done_callback(lambda: None)
        print("submitted")
    """)
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines()[-1] == "submitted"
    assert "terminate called" not in out.stderr
    assert _all_gone(_pids_of(out.stdout)) == []


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

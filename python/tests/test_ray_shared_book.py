"""Drivers of one standing cluster (test_standing's fixture: one agent, py-a, with 2 GPUs) share
the head's one book of resources, as Ray's drivers share a cluster: a driver sees the others'
bookings in available_resources(); a placement group or an actor that does not fit waits (listed
by `troupe status` as waiting, with the reason) and is placed once another driver frees what it
holds; a C++ driver's virtual cluster and a Python driver's placement groups compete in the same
book. This process is one driver; the others are child processes."""

import os
import re
import subprocess
import sys
import textwrap
import time

import pytest

import troupe
from troupe import ray
from troupe.ray import _current
from troupe.ray.util import placement_group, remove_placement_group

import ray_workers as w
from test_standing import TROUPE_CLI, standing  # noqa: F401 - the fixture

_HERE = os.path.dirname(os.path.abspath(__file__))
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(troupe.__file__)))
BOOK_GPUS = os.path.join(_PACKAGE, "..", "tests", "troupe_test_book_gpus")

HOLDER = """
import sys
from troupe import ray
from troupe.ray import _current
from troupe.ray.util import placement_group, remove_placement_group
ray.init(address=sys.argv[1])
pg = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK", name="holder")
ray.get(pg.ready(), timeout=60)
print("placed", flush=True)
sys.stdin.readline()  # the test says when to remove it
remove_placement_group(pg)
print("removed", flush=True)
sys.stdin.readline()
ray.shutdown()
"""


@pytest.fixture
def driver(standing, monkeypatch):  # noqa: F811
    """This process as a driver of the standing cluster; shut down afterwards."""
    address, token = standing
    monkeypatch.setenv("TROUPE_TOKEN", token)
    monkeypatch.delenv("TROUPE_ADDRESS", raising=False)
    ray.init(address=address)
    try:
        yield address, token
    finally:
        ray.shutdown()


def _env(token):
    env = dict(os.environ, TROUPE_TOKEN=token)
    env.pop("TROUPE_ADDRESS", None)
    env["PYTHONPATH"] = os.pathsep.join([_PACKAGE, _HERE, env.get("PYTHONPATH", "")])
    return env


def _line(proc, expected, timeout=60):
    """Reads `proc`'s stdout until a line starting with `expected`; fails with its output."""
    deadline = time.monotonic() + timeout
    seen = []
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith(expected):
            return line.strip()
    proc.kill()
    pytest.fail(f"no {expected!r} line:\n{''.join(seen)}\n{proc.stderr.read()}")


def _status_once_waiting(address, token, *what):
    """`troupe status` once its "waiting for resources" section names each of `what`."""
    deadline = time.monotonic() + 30
    while True:
        out = subprocess.run([TROUPE_CLI, "status", "--address", address], env=_env(token),
                             capture_output=True, text=True, timeout=30).stdout
        section = out.split("waiting for resources:", 1)
        if len(section) == 2 and all(w in section[1] for w in what):
            return section[1]
        assert time.monotonic() < deadline, f"not listed as waiting: {what}\n{out}"
        time.sleep(0.05)


def test_a_driver_waits_for_the_gpus_another_driver_holds(driver):
    address, token = driver
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(HOLDER), address],
                              env=_env(token), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        _line(holder, "placed")
        # Both GPUs are the other driver's, and this one sees it.
        assert ray.cluster_resources()["GPU"] == 2
        assert ray.available_resources().get("GPU", 0) == 0
        pg = placement_group([{"GPU": 1}], name="mine")
        actor = w.Counter.options(num_gpus=1, name="gpu-counter").remote(1)
        waiting = _status_once_waiting(address, token, "placement group mine",
                                       "actor ray_workers.Counter gpu-counter")
        assert "GPU 0/2" in waiting  # the reason: py-a has no GPU free
        assert ray.wait([pg.ready()], timeout=0)[0] == []

        holder.stdin.write("\n")
        holder.stdin.flush()
        _line(holder, "removed")
        ray.get(pg.ready(), timeout=60)
        _, actor_gpus, _, _ = ray.get(actor.where.remote(), timeout=60)
        assert len(actor_gpus) == 1
        assert ray.available_resources().get("GPU", 0) == 0  # this driver holds both now
    finally:
        holder.stdin.close()
        assert holder.wait(60) == 0, holder.stderr.read()


@pytest.mark.skipif(not os.path.exists(BOOK_GPUS), reason=f"{BOOK_GPUS} is not built")
def test_a_cpp_driver_and_a_python_driver_compete_for_the_gpus(driver):
    address, token = driver
    mine = placement_group([{"GPU": 1}, {"GPU": 1}], strategy="STRICT_PACK", name="first")
    ray.get(mine.ready(), timeout=60)
    cpp = subprocess.Popen([BOOK_GPUS, "2"], env=dict(_env(token), TROUPE_ADDRESS=address),
                           stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           text=True)
    try:
        waiting = _status_once_waiting(address, token, "virtual cluster cpp-driver")
        assert "GPU 0/2" in waiting
        remove_placement_group(mine)  # the C++ driver gets both GPUs
        assert _line(cpp, "placed") == "placed GPUs 0 1"

        second = placement_group([{"GPU": 1}], name="second")
        waiting = _status_once_waiting(address, token, "placement group second")
        assert re.search(r"placement group second \(driver at [^)]+\)", waiting), waiting
        cpp.stdin.close()  # the C++ driver exits: the head frees its GPUs
        assert cpp.wait(60) == 0, cpp.stderr.read()
        ray.get(second.ready(), timeout=60)
    finally:
        if cpp.poll() is None:
            cpp.kill()
            cpp.wait(10)


SERVICE = """
import sys
from troupe import ray
import ray_workers as w
ray.init(address=sys.argv[1], namespace="svc")
svc = w.Counter.options(name="gpu-service", lifetime="detached", num_gpus=2).remote(5)
print("ready", ray.get(svc.add.remote(1), timeout=60), flush=True)
ray.shutdown()  # the driver goes; the detached actor and its GPUs stay
"""


def test_a_detached_actor_keeps_its_gpus_after_its_driver_exits(driver):
    address, token = driver
    creator = subprocess.run([sys.executable, "-c", textwrap.dedent(SERVICE), address],
                             env=_env(token), capture_output=True, text=True, timeout=120)
    assert creator.returncode == 0, creator.stderr
    assert creator.stdout.split() == ["ready", "6"]
    cluster = _current.runtime().cluster
    deadline = time.monotonic() + 30
    while True:  # the head saw the creator leave: the record has no driver any more
        records = [r for r in cluster.list_names() if r["name"] == "gpu-service"]
        if records and records[0]["held_by"] == "":
            break
        assert time.monotonic() < deadline, f"the creator's leaving was not seen: {records}"
        time.sleep(0.05)
    assert records[0]["detached"] and records[0]["ns"] == "svc"
    # Its GPUs are still booked (by the cluster, for the actor), and every driver sees it.
    assert ray.available_resources().get("GPU", 0) == 0
    assert {"name": "gpu-service", "namespace": "svc"} in \
        ray.util.list_named_actors(all_namespaces=True)
    out = subprocess.run([TROUPE_CLI, "status", "--address", address], env=_env(token),
                         capture_output=True, text=True, timeout=30).stdout
    assert re.search(r"held by worker \S*ray-gpu-service\S* on py-a", out), out
    assert re.search(r"svc/gpu-service \(detached\) on py-a, .*its driver left", out), out

    pg = placement_group([{"GPU": 1}], name="after-service")
    _status_once_waiting(address, token, "placement group after-service")
    svc = ray.get_actor("gpu-service", namespace="svc")
    assert ray.get(svc.get.remote(), timeout=60) == 6  # the same actor, its state kept
    ray.kill(svc)  # its worker exits: the head frees its GPUs
    ray.get(pg.ready(), timeout=60)

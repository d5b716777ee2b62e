"""troupe.ray, the core: init, tasks, actors, get/wait/put, kill, named actors, errors, options
(real processes: an embedded 2-host cluster with declared GPUs)."""

import os
import sys
import time

import pytest

from troupe import ray
from troupe.ray import exceptions as rex

import ray_workers as w


def test_init_auto_without_a_cluster_raises_connection_error(tmp_path, monkeypatch):
    monkeypatch.delenv("TROUPE_ADDRESS", raising=False)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    assert not ray.is_initialized()
    with pytest.raises(ConnectionError):
        ray.init(address="auto")
    assert not ray.is_initialized()


def test_init_refuses_unknown_and_local_mode():
    with pytest.raises(TypeError, match="bogus"):
        ray.init(bogus=1)
    with pytest.raises(rex.NotSupportedError, match="local_mode"):
        ray.init(local_mode=True)


@pytest.fixture(scope="module")
def cluster():
    ray.init(_num_nodes=2, num_cpus=4, num_gpus=2, resources={"tag_a": 1},
             runtime_env={"env_vars": {"JOB_VAR": "job"}}, include_dashboard=False)
    assert ray.is_initialized()
    yield
    ray.shutdown()
    assert not ray.is_initialized()


def test_tasks_fan_out_and_refs_as_arguments(cluster):
    refs = [w.square.remote(i) for i in range(6)]
    assert ray.get(refs) == [0, 1, 4, 9, 16, 25]
    # A ref from a task and a put ref passed at the top level are resolved before the call.
    assert ray.get(w.add.remote(refs[3], ray.put(100))) == 109
    assert ray.get(ray.put({"k": [1, 2]})) == {"k": [1, 2]}
    a, b = w.split.remote(7)
    assert ray.get([a, b]) == [7, -7]


def test_actor_calls_run_in_order_with_pending_arguments(cluster):
    c = w.Counter.remote(10)
    slow = w.sleep_then.remote(0.3, 5)
    first = c.add.remote(slow)        # waits for `slow`
    second = c.add.remote(1)          # must still run after `first`
    assert ray.get([first, second]) == [15, 16]
    assert ray.get(c.get.remote()) == 16
    assert ray.get(c.env.remote("JOB_VAR")) == "job"


def test_get_timeout_and_wait(cluster):
    slow = w.sleep_then.remote(3, "slow")
    with pytest.raises(rex.GetTimeoutError):
        ray.get(slow, timeout=0.2)
    fast = w.sleep_then.remote(0, "fast")
    ready, not_ready = ray.wait([slow, fast], num_returns=1, timeout=10)
    assert ready == [fast] and not_ready == [slow]
    ready, not_ready = ray.wait([slow], num_returns=1, timeout=0.1)
    assert ready == [] and not_ready == [slow]


def test_task_error_is_ray_task_error_and_the_original_type(cluster):
    with pytest.raises(ValueError, match="bad input") as info:
        ray.get(w.fail.remote("bad input"))
    assert isinstance(info.value, rex.RayTaskError)
    assert isinstance(info.value.cause, ValueError)
    c = w.Counter.remote()
    with pytest.raises(KeyError) as info:
        ray.get(c.boom.remote())
    assert isinstance(info.value, rex.RayError)


def test_kill_mid_call_fails_the_call_and_later_ones(cluster):
    c = w.Counter.remote()
    assert ray.get(c.add.remote()) == 1
    pending = c.sleep.remote(30)
    ray.kill(c, no_restart=True)
    with pytest.raises(rex.ActorDiedError):
        ray.get(pending, timeout=20)
    with pytest.raises(rex.RayActorError):
        ray.get(c.get.remote(), timeout=20)


def test_max_restarts_restarts_a_killed_actor(cluster):
    c = w.Counter.options(max_restarts=1).remote(5)
    pid = ray.get(c.pid.remote())
    ray.kill(c, no_restart=False)
    deadline = time.monotonic() + 20
    while True:  # calls made while it restarts fail; the restarted actor answers
        try:
            new_pid = ray.get(c.pid.remote(), timeout=20)
            break
        except rex.RayActorError:
            assert time.monotonic() < deadline
    assert new_pid != pid
    assert ray.get(c.get.remote()) == 5  # constructed again with the same arguments


def test_named_actors(cluster):
    c = w.Counter.options(name="svc", namespace="ns1").remote(3)
    assert ray.get(ray.get_actor("svc", namespace="ns1").add.remote(1)) == 4
    assert ray.get(c.get.remote()) == 4
    with pytest.raises(ValueError, match="already taken"):
        w.Counter.options(name="svc", namespace="ns1").remote()
    same = w.Counter.options(name="svc", namespace="ns1", get_if_exists=True).remote()
    assert same == c
    with pytest.raises(ValueError, match="svc"):
        ray.get_actor("svc")  # another namespace
    ray.kill(c)
    with pytest.raises(ValueError):
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            ray.get_actor("svc", namespace="ns1")
            time.sleep(0.05)


def test_fractional_gpus_share_a_gpu_and_env_vars_apply(cluster):
    actors = [w.Counter.options(num_gpus=0.5, runtime_env={"env_vars": {"MINE": str(i)}})
              .remote() for i in range(4)]
    seen = ray.get([a.where.remote() for a in actors])
    gpus = sorted(tuple(s[1]) for s in seen)
    assert gpus == [(0,), (0,), (1,), (1,)]  # two halves per GPU, first fit on the first node
    assert all(s[2] == str(s[1][0]) for s in seen)
    assert ray.get([a.env.remote("MINE") for a in actors]) == ["0", "1", "2", "3"]
    for a in actors:
        ray.kill(a)


def test_py_executable_runs_the_actor_on_that_interpreter(cluster, tmp_path):
    python = tmp_path / "python-for-actor"
    os.symlink(sys.executable, python)
    a = w.Counter.options(runtime_env={"py_executable": str(python)}).remote()
    assert ray.get(a.executable.remote(), timeout=30) == str(python)
    with pytest.raises(rex.RuntimeEnvSetupError, match="does not exist"):
        w.Counter.options(runtime_env={"py_executable": str(tmp_path / "none")}).remote()
    ray.kill(a)


def test_actors_fork_from_a_server_that_imported_troupe_ray(cluster):
    # ray.init preloads troupe.ray's actor host in each host's fork server: an actor is forked
    # and does not import troupe.ray again, nor NumPy when no array reached it (its small
    # constructor arguments travel inline, not as an array).
    assert ray.get(w.StartProbe.options(name="probe-with-args").remote().started.remote(),
                   timeout=60) == {"forked": True, "host_imported_here": False,
                                   "numpy_loaded": False}


def test_threaded_and_async_actors_overlap(cluster):
    r = w.Rendezvous.options(max_concurrency=2).remote()
    assert sorted(ray.get([r.meet.remote(), r.meet.remote()], timeout=30)) == [0, 1]
    a = w.AsyncRendezvous.remote()
    waiting = a.wait.remote()
    assert ray.get(a.release.remote(), timeout=30) == "done"
    assert ray.get(waiting, timeout=30) == "released"


def test_streaming_generators(cluster):
    c = w.Counter.remote()
    gen = c.stream.options(num_returns="streaming").remote(3)
    assert [ray.get(r) for r in gen] == [0, 10, 20]
    assert [ray.get(r) for r in w.count_up.options(num_returns="streaming").remote(4)] == \
        [0, 1, 2, 3]


def test_handles_created_inside_an_actor(cluster):
    m = w.Maker.remote()
    assert ray.get(m.make_and_call.remote(41)) == 42
    inner = ray.get(m.make.remote(7))
    assert ray.get(inner.add.remote(1)) == 8


def test_unsupported_features_fail_at_once_naming_them(cluster):
    with pytest.raises(rex.NotSupportedError, match="pip"):
        w.Counter.options(runtime_env={"pip": ["x"]}).remote()
    with pytest.raises(ValueError, match="frobnicate"):  # as Ray: at once
        w.square.options(frobnicate=1)
    with pytest.raises(TypeError, match="remote"):
        w.square(1)
    with pytest.raises(ValueError, match="num_gpus"):
        w.Counter.options(num_gpus=1.5)


def test_runtime_context_and_resources(cluster):
    nodes = ray.nodes()
    assert len(nodes) == 2 and all(n["Alive"] for n in nodes)
    total = ray.cluster_resources()
    assert total["CPU"] == 8 and total["GPU"] == 4 and total["tag_a"] == 1
    ip, gpus, cuda, node_id = ray.get(w.where.options(num_gpus=1).remote())
    assert node_id in {n["NodeID"] for n in nodes}
    assert ip in {n["NodeManagerAddress"] for n in nodes} and ip.startswith("127.0.0.")
    assert len(gpus) == 1 and cuda == str(gpus[0])
    assert ray.get_runtime_context().get_job_id()


def test_an_actor_pool_program_with_wait(cluster):
    """A Ray-style pool: 3 actors, 9 items, each actor given the next item when it is free."""
    pool = [w.Counter.remote(100 * i) for i in range(3)]
    items = list(range(1, 10))
    busy = {}
    for actor in pool:
        busy[actor.add.remote(items.pop(0))] = actor
    results = []
    while busy:
        [done], _ = ray.wait(list(busy), num_returns=1, timeout=30)
        actor = busy.pop(done)
        results.append(ray.get(done))
        if items:
            busy[actor.add.remote(items.pop(0))] = actor
    finals = sorted(ray.get([a.get.remote() for a in pool]))
    assert len(results) == 9
    # Each actor adds its items to its base: the totals add up to the bases plus 1..9.
    assert sum(finals) == 0 + 100 + 200 + sum(range(1, 10))

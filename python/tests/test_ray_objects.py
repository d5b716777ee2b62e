"""Large ray.put values go through the object store of the driver's host, once: every call they
are passed to carries the same store object, which workers on this machine map read-only (the
simulated hosts share it; a host on another machine gets one copy through its agent, as
tests/netns/multihost_test.sh checks for troupe's own ObjectRefs), and the object is freed with
its last ref."""

import gc
import time

import numpy as np
import pytest

from troupe import ray
from troupe.ray import _current
from troupe.ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

import ray_workers as w

N = 1 << 20  # int64 elements: 8 MiB, above the 1 MiB store threshold
SUM = N * (N - 1) // 2  # 0 + 1 + ... + (N - 1)


@pytest.fixture(scope="module")
def cluster():
    ray.init(_num_nodes=2, num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def _objects(host):
    return _current.runtime().cluster.object_store_usage(host)["objects"]


def _on(node):
    return w.Inspector.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        ray.nodes()[node]["NodeID"], soft=False)).remote()


def test_a_large_put_is_one_store_object_for_every_call(cluster):
    local, remote = _on(0), _on(1)
    ray.get([local.inspect.remote(np.arange(3)), remote.inspect.remote(np.arange(3))],
            timeout=60)
    before = (_objects(0), _objects(1))
    ref = ray.put(np.arange(N, dtype=np.int64))
    assert _objects(0) == before[0] + 1  # written once, by put
    # Three calls on the driver's host, two on the other simulated host: read-only mappings.
    out = ray.get([local.inspect.remote(ref) for _ in range(3)] +
                  [remote.inspect.remote(ref) for _ in range(2)], timeout=120)
    assert out == [(SUM, False)] * 5
    assert _objects(0) == before[0] + 1  # no copy per call
    assert _objects(1) == before[1]  # the same machine: no copy for the other simulated host
    del ref
    deadline = time.monotonic() + 30
    while (_objects(0), _objects(1)) != before:  # freed with the last ref
        assert time.monotonic() < deadline, (before, _objects(0), _objects(1))
        gc.collect()
        time.sleep(0.05)
    ray.kill(local)
    ray.kill(remote)


def test_puts_a_task_drops_are_freed(cluster):
    # A worker's ray.put is the driver's object, leased to the worker: once the worker drops
    # its ref the driver forgets it (given back with the worker's next API call), so a task
    # that puts and drops 20 arrays of 8 MiB leaves at most the last one behind.
    before = _objects(0)
    assert ray.get(w.put_and_drop.remote(20, N), timeout=120) == 20
    assert _objects(0) <= before + 1
    assert ray.get(w.put_and_drop.remote(20, N), timeout=120) == 20
    assert _objects(0) <= before + 1


def test_a_ref_a_task_returns_outlives_the_task(cluster):
    # Pickled into the task's result, the worker's ref escaped: it is never given back.
    inner = ray.get(w.put_and_return.remote(N, 7), timeout=60)[0]
    assert ray.get(w.put_and_drop.remote(2, N), timeout=120) == 2  # the worker calls again
    value = ray.get(inner, timeout=60)
    assert value.shape == (N,) and int(value[0]) == 7 and int(value[-1]) == 7


def test_a_small_put_travels_inline(cluster):
    before = _objects(0)
    ref = ray.put(np.arange(10))
    assert _objects(0) == before
    assert ray.get(w.square.remote(ray.put(7)), timeout=60) == 49
    assert ray.get(ref).tolist() == list(range(10))


def test_array_arguments_are_read_only_views_as_in_ray(cluster):
    @ray.remote
    def write(a):  # defined here: the task is sent pickled by value
        a[0] = 7
        return int(a[0])

    for value in (np.zeros(N, dtype=np.int64), np.zeros(4)):  # through the store, and inline
        with pytest.raises(ValueError, match="assignment destination is read-only"):
            ray.get(write.remote(ray.put(value)), timeout=60)
    assert ray.get(write.remote(np.zeros(4).tolist()), timeout=60) == 7  # a list is a copy


def test_native_put_is_a_read_only_store_object_and_refuses_other_data():
    import troupe

    with troupe.Cluster(log_to_driver=False) as c:
        before = c.object_store_usage(0)["objects"]
        a = c.put(np.arange(300_000, dtype=np.int64))  # 2.4 MB
        assert a.dtype == np.uint8 and a.nbytes == 2_400_000 and not a.flags.writeable
        assert c.object_store_usage(0)["objects"] == before + 1
        for bad, why in ((3, "not int"), (np.arange(10)[::2], "C-contiguous")):
            with pytest.raises(troupe.InvalidArgumentError, match=why):
                c.put(bad)


def test_put_takes_a_snapshot_with_read_only_arrays(cluster):
    for size in (16, 1 << 19):  # inline, and through the object store (4 MiB)
        a = np.arange(size, dtype=np.int64)
        ref = ray.put(a)
        a[0] = -1  # after the put: ray.get keeps what was put, as Ray's does
        got = ray.get(ref)
        assert got[0] == 0 and got[-1] == size - 1
        assert not got.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            got[0] = 5
    items = [1, [2, 3]]
    ref = ray.put(items)
    items[1].append(4)
    assert ray.get(ref) == [1, [2, 3]]

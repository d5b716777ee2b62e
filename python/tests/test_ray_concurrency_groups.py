"""troupe.ray concurrency groups, as Ray documents them: each group of an actor has its own
slots (a thread pool of its size for a threaded actor, its own limit for an async one), a method
runs in its @ray.method group unless a call's .options(concurrency_group=) names another, and
everything else runs in the default group of max_concurrency."""

import pytest

from troupe import ray

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


def test_each_group_has_its_own_threads(cluster):
    a = w.Grouped.remote()
    # The default group (max_concurrency 1) runs on the actor's default pool.
    assert ray.get(a.thread.remote(), timeout=60).startswith("ray-actor_")
    # @ray.method(concurrency_group="io") runs on the io group's threads ...
    assert ray.get(a.io_thread.remote(), timeout=30).startswith("ray-actor-io_")
    # ... and two io calls overlap: the group has two threads.
    names = ray.get([a.meet_io.remote(), a.meet_io.remote()], timeout=60)
    assert all(n.startswith("ray-actor-io_") for n in names)
    assert len(set(names)) == 2
    # A call's options name another group.
    assert ray.get(a.thread.options(concurrency_group="compute").remote(),
                   timeout=30).startswith("ray-actor-compute_")
    assert ray.get(a.io_thread.options(concurrency_group="compute").remote(),
                   timeout=30).startswith("ray-actor-compute_")
    ray.kill(a)


def test_an_async_group_limits_its_own_calls(cluster):
    a = w.AsyncGrouped.remote()
    assert ray.get([a.enter.remote() for _ in range(4)], timeout=60) == [True] * 4
    assert ray.get(a.most_at_once.remote(), timeout=30) == 2
    ray.kill(a)


def test_unknown_groups_are_refused(cluster):
    a = w.Grouped.remote()
    with pytest.raises(ValueError, match="'nope' is not one of the actor's"):
        a.thread.options(concurrency_group="nope").remote()
    with pytest.raises(ValueError, match="concurrency group 'io', which the actor does not"):
        w.Grouped.options(concurrency_groups={"compute": 1}).remote()
    with pytest.raises(ValueError, match="sizes >= 1"):
        w.Grouped.options(concurrency_groups={"io": 0, "compute": 1}).remote()
    ray.kill(a)


def test_a_threaded_actor_answers_a_long_burst_of_calls(cluster):
    # 60,000 calls to a threaded actor whose replies carry bytes: the worker's method threads
    # reply (holding the GIL) while its I/O thread releases written replies' Python buffers
    # (taking the GIL); before the transport released them outside its write lock, this
    # deadlocked within a few thousand calls.
    a = w.Threaded.options(max_concurrency=2).remote()
    for _ in range(60):
        assert ray.get([a.small_value.remote() for _ in range(1000)], timeout=60) == [b"ok"] * 1000

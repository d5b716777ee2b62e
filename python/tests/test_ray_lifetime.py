"""troupe.ray actor lifetimes, as Ray documents them: an actor ends once every handle to it has
gone out of scope, after the calls already submitted to it; a detached actor, and one whose
handle was passed out of the driver, live until ray.kill (or shutdown). The driver records each
decision it takes when its last handle goes (DriverRuntime.lifetime_decisions)."""

import gc
import os
import time

import pytest

from troupe import ray
from troupe.ray import _current

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


def _decision(actor_id, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        gc.collect()
        for aid, what in list(_current.runtime().lifetime_decisions):
            if aid == actor_id:
                return what
        time.sleep(0.01)
    pytest.fail(f"no lifetime decision for {actor_id}")


def _gone(pid, timeout=30):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.01)
    return False


def _alive(pid):
    try:
        os.kill(pid, 0)
        return True
    except ProcessLookupError:
        return False


def test_the_last_handle_ends_the_actor_after_its_running_call(cluster):
    a = w.Counter.remote(5)
    actor_id = a._actor_id_hex()
    pid = ray.get(a.pid.remote(), timeout=60)
    running = a.sleep.remote(0.5)
    queued = a.add.remote(2)
    del a
    assert _decision(actor_id) == "collected"
    # The calls submitted before the last handle went still complete, in order.
    assert ray.get(running, timeout=30) == 0.5
    assert ray.get(queued, timeout=30) == 7
    assert _gone(pid)


def test_a_temporary_handle_still_answers_its_call(cluster):
    assert ray.get(w.Counter.remote(3).add.remote(4), timeout=60) == 7


def test_every_handle_counts_and_a_named_actor_is_collected_too(cluster):
    named = w.Counter.options(name="held").remote(0)
    again = ray.get_actor("held")  # a second handle to the same actor
    named_id, pid = named._actor_id_hex(), ray.get(named.pid.remote(), timeout=60)
    del named
    gc.collect()
    assert ray.get(again.add.remote(1), timeout=30) == 1  # `again` still holds it
    del again
    assert _decision(named_id) == "collected"  # named, not detached: collected, as in Ray
    assert _gone(pid)
    deadline = time.monotonic() + 30
    while True:  # the name is free once the runtime has seen the actor die
        try:
            ray.get_actor("held")
        except ValueError:
            break
        assert time.monotonic() < deadline, "the name 'held' was never freed"
        time.sleep(0.01)


def test_detached_and_escaped_actors_are_kept(cluster):
    d = w.Counter.options(name="detached-one", lifetime="detached").remote(0)
    d_id, d_pid = d._actor_id_hex(), ray.get(d.pid.remote(), timeout=60)
    del d
    assert _decision(d_id) == "kept: detached"
    assert _alive(d_pid)
    ray.kill(ray.get_actor("detached-one"))

    e = w.Counter.options(name="escaped-one").remote(0)
    e_id, e_pid = e._actor_id_hex(), ray.get(e.pid.remote(), timeout=60)
    assert ray.get(w.call_add.remote(e, 5), timeout=60) == 5  # the handle went to a task
    del e
    assert _decision(e_id) == "kept: a handle left the driver"
    assert _alive(e_pid)
    assert ray.get(ray.get_actor("escaped-one").get.remote(), timeout=30) == 5
    ray.kill(ray.get_actor("escaped-one"))

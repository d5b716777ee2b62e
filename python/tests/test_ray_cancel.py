"""ray.cancel on troupe.ray, against Ray's documented behaviour: a task not yet running never
runs and raises TaskCancelledError; a running one is stopped (TaskCancelledError with force,
RayTaskError(TaskCancelledError) without); an ended task keeps its result; force on an actor
call is a ValueError; a worker cancels the tasks it submitted."""

import os
import time

import pytest

from troupe import ray
from troupe.ray import exceptions as rex

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=1, include_dashboard=False)  # one CPU: a second task queues
    yield
    ray.shutdown()


def _wait_for(path):
    deadline = time.monotonic() + 60
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.01)


def test_a_queued_task_never_runs_and_a_running_one_stops(cluster, tmp_path):
    running = w.mark_and_spin.remote(str(tmp_path / "running"))
    queued = w.mark.remote(str(tmp_path / "queued"), "queued ran")  # behind `running`
    _wait_for(tmp_path / "running")
    ray.cancel(queued)
    with pytest.raises(rex.TaskCancelledError):
        ray.get(queued, timeout=60)
    ray.cancel(running)
    with pytest.raises(rex.TaskCancelledError) as err:
        ray.get(running, timeout=60)
    assert isinstance(err.value, rex.RayTaskError)  # without force: the task's own error
    # The one CPU is free again; `queued` was ahead of `after` in the queue, so had it not been
    # dropped it would have run first and made its file.
    assert ray.get(w.mark.remote(str(tmp_path / "after"), "after"), timeout=60) == "after"
    assert not (tmp_path / "queued").exists()


def test_force_cancel_and_cancel_of_an_ended_task(cluster, tmp_path):
    ref = w.mark_and_spin.remote(str(tmp_path / "spin"))
    _wait_for(tmp_path / "spin")
    ray.cancel(ref, force=True)
    with pytest.raises(rex.TaskCancelledError) as err:
        ray.get(ref, timeout=60)
    assert not isinstance(err.value, rex.RayTaskError)
    done = w.square.remote(7)
    assert ray.get(done, timeout=60) == 49
    ray.cancel(done)
    assert ray.get(done) == 49


def test_multiple_returns_are_cancelled_together(cluster, tmp_path):
    blocker = w.mark_and_spin.remote(str(tmp_path / "blocker"))
    a, b = w.split.options(num_returns=2).remote([1, 2])
    ray.cancel(b)
    for ref in (a, b):
        with pytest.raises(rex.TaskCancelledError):
            ray.get(ref, timeout=60)
    ray.cancel(blocker, force=True)


def test_bad_targets(cluster):
    counter = w.Counter.remote()
    with pytest.raises(ValueError, match="actor tasks"):
        ray.cancel(counter.sleep.remote(30), force=True)  # running: not ended
    with pytest.raises(TypeError, match="ray.kill"):
        ray.cancel(counter)
    ray.kill(counter)


def test_a_task_cancels_a_task_it_submitted(cluster, tmp_path):
    ray.shutdown()
    ray.init(num_cpus=2, include_dashboard=False)  # the outer task and the inner one
    assert ray.get(w.cancel_nested.remote(str(tmp_path / "inner")),
                   timeout=120) == "TaskCancelledError"

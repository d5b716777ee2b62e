"""ObjectRefGenerators (num_returns="streaming") crossing processes, as Ray allows: passed to a
task or actor, which iterates it (the items it takes are taken from the driver's generator), and
made inside a worker by a nested streaming call."""

import pytest

from troupe import ray

import ray_workers as w


@pytest.fixture(scope="module")
def cluster():
    ray.init(num_cpus=4, include_dashboard=False)
    yield
    ray.shutdown()


def test_a_generator_passed_to_a_task(cluster):
    gen = w.count_up.options(num_returns="streaming").remote(4)
    assert ray.get(w.consume.remote(gen), timeout=60) == [0, 1, 2, 3]
    # The task took every item: the driver's generator is at its end too.
    assert list(gen) == []


def test_a_generator_shared_between_the_driver_and_a_task(cluster):
    c = w.Counter.remote()
    gen = c.stream.options(num_returns="streaming").remote(3)
    assert ray.get(next(gen), timeout=30) == 0  # the driver takes the first item
    assert ray.get(w.consume.remote(gen), timeout=60) == [10, 20]


def test_a_streaming_call_made_inside_a_worker(cluster):
    c = w.Counter.remote()
    assert ray.get(w.stream_from.remote(c, 3), timeout=60) == [0, 10, 20]

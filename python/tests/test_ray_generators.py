"""ObjectRefGenerators (num_returns="streaming") crossing processes, as Ray allows: passed to a
task or actor, which iterates it (the items it takes are taken from the driver's generator), and
made inside a worker by a nested streaming call; async-generator methods of async actors stream
too, on the actor's event loop, and a generator can be iterated with `async for`."""

import asyncio

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


@ray.remote
class Gate:
    """An async actor whose stream awaits an event that an earlier call of it made on its event
    loop: the stream's items run on that same loop (an asyncio.Event of another loop would not
    be awaitable there)."""

    def __init__(self):
        self.opened = None

    async def make_open_event(self):
        self.opened = asyncio.Event()
        asyncio.get_running_loop().call_later(0.2, self.opened.set)  # set by this loop, later
        return True

    async def stream(self):
        yield "before"
        await self.opened.wait()
        yield "after"
        raise ValueError("the stream's own error")


def test_an_async_generator_method_streams_on_the_actors_event_loop(cluster):
    g = Gate.remote()
    assert ray.get(g.make_open_event.remote(), timeout=30)
    gen = g.stream.remote()
    assert ray.get(next(gen), timeout=30) == "before"
    assert ray.get(next(gen), timeout=30) == "after"
    with pytest.raises(ValueError, match="the stream's own error"):
        ray.get(next(gen), timeout=30)
    with pytest.raises(StopIteration):
        next(gen)


def test_async_for_over_a_generator(cluster):
    async def collect():
        return [await ref async for ref in w.count_up.options(num_returns="streaming").remote(3)]

    assert asyncio.run(collect()) == [0, 1, 2]

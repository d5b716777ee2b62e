"""Tasks and actors for the troupe.ray tests (importable by the workers)."""

import asyncio
import os
import socket
import sys
import threading
import time

from troupe import ray


@ray.remote
def square(x):
    return x * x


@ray.remote
def add(a, b):
    return a + b


@ray.remote
def sleep_then(seconds, value):
    time.sleep(seconds)
    return value


@ray.remote
def call_add(counter, x):
    """Calls add(x) on the actor whose handle it was given."""
    return ray.get(counter.add.remote(x))


@ray.remote
def fail(message):
    raise ValueError(message)


@ray.remote(num_returns=2)
def split(x):
    return x, -x


@ray.remote
def where():
    """(node ip, GPU ids, CUDA_VISIBLE_DEVICES, node id) as the task sees them."""
    return (ray.util.get_node_ip_address(), ray.get_gpu_ids(),
            os.environ.get("CUDA_VISIBLE_DEVICES"), ray.get_runtime_context().get_node_id())


@ray.remote
def count_up(n):
    for i in range(n):
        yield i


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.value = start

    def add(self, x=1):
        self.value += x
        return self.value

    def get(self):
        return self.value

    def pid(self):
        return os.getpid()

    def executable(self):
        return sys.executable

    def env(self, name):
        return os.environ.get(name)

    def sleep(self, seconds):
        time.sleep(seconds)
        return seconds

    def where(self):
        return (ray.util.get_node_ip_address(), ray.get_gpu_ids(),
                os.environ.get("CUDA_VISIBLE_DEVICES"),
                ray.get_runtime_context().get_actor_id())

    def stream(self, n):
        for i in range(n):
            yield i * 10

    def boom(self):
        raise KeyError("missing")


@ray.remote
class Rendezvous:
    """A threaded actor (max_concurrency=2 at creation): meet() returns only when two calls
    run at the same time."""

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=10)

    def meet(self):
        return self.barrier.wait()


@ray.remote
class AsyncRendezvous:
    """An async actor: wait() finishes only once release() ran, so they must overlap."""

    def __init__(self):
        self.event = None

    async def wait(self):
        if self.event is None:
            self.event = asyncio.Event()
        await asyncio.wait_for(self.event.wait(), 10)
        return "released"

    async def release(self):
        if self.event is None:
            self.event = asyncio.Event()
        self.event.set()
        return "done"


@ray.remote
class Maker:
    """Creates a Counter from inside a worker and returns its handle (as the reference's
    initializer actor does)."""

    def make(self, start):
        return Counter.remote(start)

    def make_and_call(self, start):
        c = Counter.remote(start)
        return ray.get(c.add.remote(1))


@ray.remote(concurrency_groups={"io": 2, "compute": 1})
class Grouped:
    """A threaded actor with two concurrency groups besides its default one (max_concurrency 1):
    each method reports the thread it ran on; meet_io returns only when two io calls overlap."""

    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=30)

    def thread(self):
        return threading.current_thread().name

    @ray.method(concurrency_group="io")
    def io_thread(self):
        return threading.current_thread().name

    @ray.method(concurrency_group="io")
    def meet_io(self):
        self.barrier.wait()
        return threading.current_thread().name


@ray.remote(concurrency_groups={"pair": 2})
class AsyncGrouped:
    """An async actor: calls in group "pair" (size 2) record the most of them that ran at once;
    each waits (up to 30 s) until two have run at once, so the first two overlap."""

    def __init__(self):
        self.running = 0
        self.most = 0
        self.cond = None

    @ray.method(concurrency_group="pair")
    async def enter(self):
        if self.cond is None:
            self.cond = asyncio.Condition()
        async with self.cond:
            self.running += 1
            self.most = max(self.most, self.running)
            self.cond.notify_all()
            met = await asyncio.wait_for(self.cond.wait_for(lambda: self.most >= 2), 30)
        async with self.cond:
            self.running -= 1
        return met

    async def most_at_once(self):
        return self.most


@ray.remote
class StartProbe:
    """How this actor's process started."""

    def started(self):
        from troupe.ray import _host

        with open("/proc/self/environ", "rb") as f:
            forked = b"TROUPE_ROLE=forkserver" in f.read().split(b"\0")  # FS-2: inherited block
        return {"forked": forked, "host_imported_here": _host.IMPORTED_BY_PID == os.getpid(),
                "numpy_loaded": "numpy" in sys.modules}


@ray.remote
class ApiPath:
    """How this worker reaches the driver's API (after one nested call)."""

    def nested(self, start):
        from troupe.ray import _proxy

        c = Counter.remote(start)
        value = ray.get(c.add.remote(1))
        conn = _proxy.client()._conn()
        return value, conn.family == socket.AF_INET


@ray.remote
def consume(gen):
    """The values of an ObjectRefGenerator it was given, in order."""
    return [ray.get(ref) for ref in gen]


@ray.remote
def stream_from(counter, n):
    """Makes a streaming call itself and returns what it yielded."""
    return [ray.get(ref) for ref in counter.stream.options(num_returns="streaming").remote(n)]


@ray.remote
class Inspector:
    """Reports what an argument arrived as."""

    def inspect(self, array):
        return int(array.sum()), bool(array.flags.writeable)


# A class made by type() inside a module, as verl makes its FusedWorker: its __module__ is this
# module, but no name here is "MadeByType", so troupe.ray has to send it by value.
made_by_type = ray.remote(type("MadeByType", (), {"hello": lambda self: "made by type()"}))


@ray.remote
def put_and_drop(n, elements):
    """Puts `n` arrays of `elements` int64 from inside the task, reads each back and drops it."""
    import numpy as np

    for i in range(n):
        ref = ray.put(np.full(elements, i, dtype=np.int64))
        assert int(ray.get(ref)[0]) == i
        del ref
    return n


@ray.remote
def put_and_return(elements, value):
    """A ref made inside the task, returned to the caller inside a list."""
    import numpy as np

    return [ray.put(np.full(elements, value, dtype=np.int64))]


@ray.remote
class Threaded:
    def small_value(self):
        return b"ok"


@ray.remote
def mark_and_spin(path):
    """Creates `path` (the test's sign that it runs), then runs until stopped."""
    open(path, "w").close()
    while True:
        time.sleep(0.01)


@ray.remote
def mark(path, value):
    """Creates `path` and returns `value`."""
    open(path, "w").close()
    return value


@ray.remote
def cancel_nested(path):
    """Submits mark_and_spin(path) from inside a task, cancels it once it runs, and returns the
    type name of the error its ray.get raises."""
    ref = mark_and_spin.remote(path)
    while not os.path.exists(path):
        time.sleep(0.01)
    ray.cancel(ref, force=True)
    try:
        ray.get(ref, timeout=60)
    except ray.exceptions.RayError as e:
        return type(e).__name__
    return "no error"

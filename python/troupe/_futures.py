"""Futures: the results of calls, to wait on, gather or await."""

import asyncio
import time

from troupe import _core


class Future:
    """The result of one call to one worker.

    ``result(timeout=None)`` blocks (without the GIL) until the call completes and returns its
    value or raises its error (a :class:`troupe.TroupeError` subclass naming the worker and
    method); ``troupe.TimeoutError`` when ``timeout`` seconds pass first (the call goes on).
    A Future can be awaited from asyncio: ``value = await future``.
    """

    __slots__ = ("_f",)

    def __init__(self, core_future):
        self._f = core_future

    def result(self, timeout=None):
        """The call's value; raises its error, or troupe.TimeoutError after `timeout` seconds."""
        return self._f.result(timeout)

    def exception(self, timeout=None):
        """The call's error as an exception object, or None when it succeeded."""
        return self._f.exception(timeout)

    def wait(self, timeout=None):
        """Blocks until done or `timeout` seconds passed; returns whether it is done."""
        return self._f.wait(timeout)

    def done(self):
        """Whether the call completed (successfully or not)."""
        return self._f.done()

    def add_done_callback(self, fn):
        """Calls ``fn(self)`` once done: at once when already done, otherwise on a troupe I/O
        thread (keep it short; it must not block)."""
        self._f.add_done_callback(lambda: fn(self))

    def __await__(self):
        loop = asyncio.get_running_loop()
        waiter = loop.create_future()

        def wake():
            loop.call_soon_threadsafe(lambda: waiter.done() or waiter.set_result(None))

        self._f.add_done_callback(wake)
        yield from waiter.__await__()
        return self._f.result(0)

    def __repr__(self):
        return f"<troupe.Future {self._f.context()} {'done' if self.done() else 'pending'}>"


class MultiWorkerFuture:
    """The futures of one dispatch to a worker group (the reference's MultiWorkerFuture).

    ``futures[i]`` is the call to worker ``called_workers[i]``; ``return_from_workers`` lists the
    workers whose results count (one per DP shard or per output-replicated group).
    ``get_results()`` / ``result()`` returns those results in ``return_from_workers`` order.
    Iterating yields the futures; ``await mwf`` gives the results.
    """

    def __init__(self, core):
        self._m = core
        self.futures = [Future(f) for f in core.futures]
        self.called_workers = list(core.called_workers)
        self.return_from_workers = list(core.return_from_workers)

    def result(self, timeout=None):
        """The results in return_from_workers order; raises the first failure."""
        return self._m.get(timeout)

    def get_results(self, worker_group=None, return_generators_as_proxies=False, timeout=None):
        """As in the reference: the results in return_from_workers order (`worker_group` is
        accepted for compatibility and not needed)."""
        if return_generators_as_proxies:
            return self.futures
        return self.result(timeout)

    def wait(self, timeout=None):
        """Blocks until every call completed or `timeout` seconds passed; returns whether all did."""
        return self._m.wait(timeout)

    def __iter__(self):
        return iter(self.futures)

    def __len__(self):
        return len(self.futures)

    def __getitem__(self, i):
        return self.futures[i]

    def __await__(self):
        for f in self.futures:
            yield from _await_done(f).__await__()
        return self.result(0)

    def __repr__(self):
        return (f"<troupe.MultiWorkerFuture called={self.called_workers} "
                f"return_from={self.return_from_workers}>")


async def _await_done(f):
    try:
        await f
    except Exception:  # noqa: BLE001 - the error is raised by result() in order
        pass


def gather(futures, timeout=None):
    """Waits for every future (Future or MultiWorkerFuture) and returns their results in order.
    Raises the first error (in order); troupe.TimeoutError when `timeout` seconds pass first."""
    deadline = None if timeout is None else time.monotonic() + timeout
    out = []
    for f in futures:
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        out.append(f.result(left))
    return out


class Stream:
    """The items of a streamed call (a generator method of a Python worker, or a C++ stream
    method). Iterate it; ``next(timeout)`` waits at most `timeout` seconds for one item;
    ``done()`` is the Future of the method's return value."""

    def __init__(self, core):
        self._s = core

    def __iter__(self):
        return self

    def __next__(self):
        return self._s.next(None)

    def next(self, timeout=None):
        """The next item; raises StopIteration at the end, or the call's error."""
        return self._s.next(timeout)

    def done(self):
        """The Future of the method's return value (it ends the stream)."""
        return Future(self._s.done())


_ = _core  # the module is needed loaded before any future exists

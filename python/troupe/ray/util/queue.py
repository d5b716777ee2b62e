"""``ray.util.queue``: a first-in first-out queue held by an async actor, as Ray's: any driver,
task or actor that has the Queue (it pickles as its actor's handle) puts and gets; ``put`` blocks
while it is full, ``get`` while it is empty (``block=False`` or a timeout raises Full / Empty)."""

import asyncio
import queue as _stdlib_queue
from collections.abc import Iterable

from troupe.ray import _public


class Empty(_stdlib_queue.Empty):
    pass


class Full(_stdlib_queue.Full):
    pass


class _QueueActor:
    def __init__(self, maxsize):
        self.maxsize = maxsize
        self.queue = asyncio.Queue(maxsize)

    def qsize(self):
        return self.queue.qsize()

    def empty(self):
        return self.queue.empty()

    def full(self):
        return self.queue.full()

    async def put(self, item, timeout=None):
        try:
            await asyncio.wait_for(self.queue.put(item), timeout)
        except asyncio.TimeoutError:
            raise Full from None

    async def get(self, timeout=None):
        try:
            return await asyncio.wait_for(self.queue.get(), timeout)
        except asyncio.TimeoutError:
            raise Empty from None

    def put_nowait(self, item):
        self.queue.put_nowait(item)

    def put_nowait_batch(self, items):
        if self.maxsize > 0 and len(items) + self.qsize() > self.maxsize:
            raise Full(f"Cannot add {len(items)} items to queue of size {self.qsize()} and "
                       f"maxsize {self.maxsize}.")
        for item in items:
            self.queue.put_nowait(item)

    def get_nowait(self):
        return self.queue.get_nowait()

    def get_nowait_batch(self, num_items):
        if num_items > self.qsize():
            raise Empty(f"Cannot get {num_items} items from queue of size {self.qsize()}.")
        return [self.queue.get_nowait() for _ in range(num_items)]


def _check_timeout(timeout):
    if timeout is not None and timeout < 0:
        raise ValueError("'timeout' must be a non-negative number")


class Queue:
    """``Queue(maxsize=0, actor_options=None)``: maxsize 0 is unbounded; `actor_options` go to
    the queue actor's ``.options()`` (e.g. its resources)."""

    def __init__(self, maxsize=0, actor_options=None):
        self.maxsize = maxsize
        self.actor = _public.remote(_QueueActor).options(**(actor_options or {})).remote(maxsize)

    def __len__(self):
        return self.size()

    def _get(self, ref):
        return _public.get(ref)

    def size(self):
        return self._get(self.actor.qsize.remote())

    def qsize(self):
        return self.size()

    def empty(self):
        return self._get(self.actor.empty.remote())

    def full(self):
        return self._get(self.actor.full.remote())

    def put(self, item, block=True, timeout=None):
        """Adds `item`; blocks while full (at most `timeout` seconds), or with block=False
        raises Full at once."""
        if self.maxsize <= 0:
            self._get(self.actor.put_nowait.remote(item))
        elif not block:
            try:
                self._get(self.actor.put_nowait.remote(item))
            except asyncio.QueueFull:
                raise Full from None
        else:
            _check_timeout(timeout)
            self._get(self.actor.put.remote(item, timeout))

    async def put_async(self, item, block=True, timeout=None):
        if self.maxsize <= 0:
            await self.actor.put_nowait.remote(item)
        elif not block:
            try:
                await self.actor.put_nowait.remote(item)
            except asyncio.QueueFull:
                raise Full from None
        else:
            _check_timeout(timeout)
            await self.actor.put.remote(item, timeout)

    def get(self, block=True, timeout=None):
        """The first item; blocks while empty (at most `timeout` seconds), or with block=False
        raises Empty at once."""
        if not block:
            try:
                return self._get(self.actor.get_nowait.remote())
            except asyncio.QueueEmpty:
                raise Empty from None
        _check_timeout(timeout)
        return self._get(self.actor.get.remote(timeout))

    async def get_async(self, block=True, timeout=None):
        if not block:
            try:
                return await self.actor.get_nowait.remote()
            except asyncio.QueueEmpty:
                raise Empty from None
        _check_timeout(timeout)
        return await self.actor.get.remote(timeout)

    def put_nowait(self, item):
        return self.put(item, block=False)

    def put_nowait_batch(self, items):
        if not isinstance(items, Iterable):
            raise TypeError("Argument 'items' must be an Iterable")
        self._get(self.actor.put_nowait_batch.remote(list(items)))

    def get_nowait(self):
        return self.get(block=False)

    def get_nowait_batch(self, num_items):
        if not isinstance(num_items, int):
            raise TypeError("Argument 'num_items' must be an int")
        if num_items < 0:
            raise ValueError("'num_items' must be nonnegative")
        return self._get(self.actor.get_nowait_batch.remote(num_items))

    def shutdown(self, force=False, grace_period_s=5):
        """Ends the queue's actor (its items are lost)."""
        if self.actor is not None:
            _public.kill(self.actor, no_restart=True)
        self.actor = None

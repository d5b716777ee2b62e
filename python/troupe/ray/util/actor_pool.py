"""``ray.util.ActorPool``: a fixed set of actors that work is spread over, as Ray's: each actor
takes one submitted call at a time; work submitted while every actor is busy waits in order
until one is free (an actor is free again once its call's result is taken)."""

from troupe.ray import _public
from troupe.ray import exceptions as rex

_TIMEOUT = "Timed out waiting for result"


class ActorPool:
    """``ActorPool(actors)``; ``map(fn, values)`` / ``map_unordered`` yield the results of
    ``fn(actor, value)`` (an ObjectRef) in submission order / as they finish; ``submit`` +
    ``get_next`` / ``get_next_unordered`` do the same one at a time."""

    def __init__(self, actors):
        self._idle_actors = list(actors)
        self._future_to_actor = {}  # ref (a tuple for a list of refs) -> (index, actor)
        self._index_to_future = {}
        self._next_task_index = 0
        self._next_return_index = 0
        self._pending_submits = []

    @staticmethod
    def _key(future):
        return tuple(future) if isinstance(future, list) else future

    def _drain(self, unordered):
        while self.has_next():
            try:
                if unordered:
                    self.get_next_unordered(timeout=0)
                else:
                    self.get_next(timeout=0, ignore_if_timedout=True)
            except TimeoutError:
                pass

    def map(self, fn, values):
        """An iterator of the results of fn(actor, value) for each value, in order (results still
        pending from earlier submits are dropped first, as Ray's map does)."""
        return self._map(fn, values, False)

    def map_unordered(self, fn, values):
        """As map(), in the order the results finish."""
        return self._map(fn, values, True)

    def _map(self, fn, values, unordered):
        self._drain(unordered)
        for v in values:
            self.submit(fn, v)
        next_result = self.get_next_unordered if unordered else self.get_next

        def results():
            while self.has_next():
                yield next_result()

        return results()

    def submit(self, fn, value):
        """Runs fn(actor, value) on an idle actor, or queues it until one is idle."""
        if not self._idle_actors:
            self._pending_submits.append((fn, value))
            return
        actor = self._idle_actors.pop()
        future = fn(actor, value)
        self._future_to_actor[self._key(future)] = (self._next_task_index, actor)
        self._index_to_future[self._next_task_index] = future
        self._next_task_index += 1

    def has_next(self):
        """Whether a submitted result has not been returned yet."""
        return bool(self._future_to_actor)

    def get_next(self, timeout=None, ignore_if_timedout=False):
        """The next result in submission order (TimeoutError after `timeout` seconds; with
        `ignore_if_timedout`, that result is skipped)."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        if self._next_return_index >= self._next_task_index:
            raise ValueError("It is not allowed to call get_next() after "
                             "get_next_unordered().")
        future = self._index_to_future[self._next_return_index]
        timed_out = False
        if timeout is not None:
            ready, _ = _public.wait([future] if not isinstance(future, list) else future,
                                    num_returns=1 if not isinstance(future, list) else len(future),
                                    timeout=timeout)
            if not ready:
                if not ignore_if_timedout:
                    raise TimeoutError(_TIMEOUT)
                timed_out = True
        del self._index_to_future[self._next_return_index]
        self._next_return_index += 1
        _, actor = self._future_to_actor.pop(self._key(future))
        if timed_out:
            self._return_actor(actor)
            raise TimeoutError(f"{_TIMEOUT}. The task {future} has been ignored.")
        return self._get_result(future, actor)

    def get_next_unordered(self, timeout=None, ignore_if_timedout=False):
        """Whichever submitted result finishes first."""
        if not self.has_next():
            raise StopIteration("No more results to get")
        ready, _ = _public.wait(list(self._future_to_actor), num_returns=1, timeout=timeout)
        if not ready:
            raise TimeoutError(_TIMEOUT)
        future = ready[0]
        index, actor = self._future_to_actor.pop(future)
        del self._index_to_future[index]
        self._next_return_index = max(self._next_return_index, index + 1)
        return self._get_result(future, actor)

    def _get_result(self, future, actor):
        alive = True
        try:
            return _public.get(list(future) if isinstance(future, tuple) else future)
        except rex.ActorDiedError:
            alive = False  # a dead actor leaves the pool
            raise
        finally:
            self._return_actor(actor, alive)

    def _return_actor(self, actor, alive=True):
        if alive:
            self._idle_actors.append(actor)
        if self._pending_submits and self._idle_actors:
            self.submit(*self._pending_submits.pop(0))

    def has_free(self):
        """Whether an actor is idle and nothing waits for one."""
        return bool(self._idle_actors) and not self._pending_submits

    def pop_idle(self):
        """Removes an idle actor from the pool and returns it (None when none is idle)."""
        return self._idle_actors.pop() if self.has_free() else None

    def push(self, actor):
        """Adds `actor` to the pool (it takes queued work at once)."""
        busy = {a for _, a in self._future_to_actor.values()}
        if actor in self._idle_actors or actor in busy:
            raise ValueError("Actor already belongs to current ActorPool")
        self._return_actor(actor)

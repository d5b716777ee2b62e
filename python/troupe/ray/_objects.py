"""ObjectRef: the future of a value (a call's result, a task's result, or a ray.put value).

A driver's ObjectRef has a _Cell: either bound to a troupe.Future (the call sent to a worker),
or set directly (ray.put, a placement group's readiness, a call that failed before it was sent).
A call waiting for its arguments or its actor has an unbound cell; get() waits for the binding.
A worker's ObjectRef has only an id: its operations go to the driver (troupe.ray._proxy).
"""

import itertools
import os
import threading
import time

import troupe
from troupe.ray import _context, _serial
from troupe.ray import exceptions as rex

_ids = itertools.count(1)
_PREFIX = os.urandom(8).hex()


def new_id():
    return f"{_PREFIX}{next(_ids):016x}"


class _Cell:
    """One result, completed once. Thread-safe. `decode(raw)` turns the bound future's raw
    result into the value (or raises); `error_of(troupe_error)` maps the future's failure."""

    __slots__ = ("_lock", "_bound", "_future", "_decode", "_error_of", "_state", "_value",
                 "_callbacks", "_waiters", "_hooked")

    def __init__(self, decode=None, error_of=None):
        self._lock = threading.Lock()
        self._bound = threading.Event()
        self._future = None
        self._decode = decode
        self._error_of = error_of
        self._state = None  # None, "value", "error"
        self._value = None
        self._callbacks = []
        self._waiters = None  # the Events of ray.wait calls waiting on this cell
        self._hooked = False  # whether _wake_waiters is registered (once per cell)

    @classmethod
    def of_future(cls, future, decode, error_of):
        """A cell bound to `future` from the start (the fast path of an actor call)."""
        c = cls.__new__(cls)
        c._lock = threading.Lock()
        c._bound = _ALWAYS
        c._future, c._decode, c._error_of = future, decode, error_of
        c._state = c._value = None
        c._callbacks = []
        c._waiters = None
        c._hooked = False
        return c

    @classmethod
    def of_value(cls, value):
        c = cls()
        c.set_value(value)
        return c

    def bind(self, future):
        """Completes this cell with `future`'s outcome (a troupe.Future or troupe.Stream-free
        object with result/wait/done/add_done_callback)."""
        with self._lock:
            self._future = future
            callbacks, self._callbacks = self._callbacks, []
        self._bound.set()
        for fn in callbacks:
            future.add_done_callback(lambda _f, fn=fn: fn())

    def set_value(self, value):
        self._complete("value", value)

    def set_error(self, error):
        self._complete("error", error)

    def _complete(self, state, value):
        with self._lock:
            if self._bound.is_set():
                return
            self._state, self._value = state, value
            callbacks, self._callbacks = self._callbacks, []
        self._bound.set()
        for fn in callbacks:
            fn()

    def done(self):
        if not self._bound.is_set():
            return False
        return self._future is None or self._future.done()

    def wait(self, timeout=None):
        """Whether the cell completed within `timeout` seconds."""
        deadline = None if timeout is None else time.monotonic() + timeout
        if not self._bound.wait(timeout):
            return False
        if self._future is None:
            return True
        left = None if deadline is None else max(0.0, deadline - time.monotonic())
        return self._future.wait(left)

    def add_done_callback(self, fn):
        """Calls fn() once complete (at once when it is; else on the thread that completes it:
        keep it short)."""
        with self._lock:
            if not self._bound.is_set():
                self._callbacks.append(fn)
                return
        if self._future is None:
            fn()
        else:
            self._future.add_done_callback(lambda _f: fn())

    def add_waiter(self, event):
        """Sets `event` once this cell completes (at once if it has); remove_waiter(event) takes
        it off. One callback per cell however many waits come and go, so a loop of ray.wait
        over the same refs does not pile callbacks onto their futures."""
        with self._lock:
            if self._waiters is None:
                self._waiters = set()
            self._waiters.add(event)
            hook = not self._hooked
            self._hooked = True
        if hook:
            self.add_done_callback(self._wake_waiters)
        elif self.done():
            event.set()

    def remove_waiter(self, event):
        with self._lock:
            if self._waiters is not None:
                self._waiters.discard(event)

    def _wake_waiters(self):
        with self._lock:
            waiters, self._waiters = self._waiters, None
        for event in waiters or ():
            event.set()

    def result(self, timeout=None):
        """The value; raises the error, or GetTimeoutError after `timeout` seconds."""
        if not self.wait(timeout):
            raise rex.GetTimeoutError(f"Get timed out: some object(s) not ready after {timeout} s")
        if self._future is not None:
            with self._lock:
                if self._state is None:
                    try:
                        raw = self._future.result(0)
                        self._state, self._value = "value", self._decode(raw)
                    except troupe.TroupeError as e:
                        self._state, self._value = "error", self._error_of(e)
                    except Exception as e:  # noqa: BLE001 - decode() raised the task's error
                        self._state, self._value = "error", e
        if self._state == "error":
            raise self._value
        return self._value


_ALWAYS = threading.Event()  # the binding event of cells bound when made
_ALWAYS.set()


def decode_result(raw):
    """The value of a host's result tuple (troupe.ray._host); raises the task's error."""
    if raw[0] == "ok":
        return raw[1]
    if raw[0] == "okp":
        return _serial.loads(raw[1], raw[2])
    _, pickled, type_name, message, tb, pid, ip = raw
    cause = None
    if pickled is not None:
        try:
            import pickle

            cause = pickle.loads(pickled)
        except Exception:  # noqa: BLE001
            cause = None
    if cause is None:
        cause = rex.RaySystemError(f"{type_name}: {message}")
    if isinstance(cause, rex.RayTaskError):  # raised by a nested ray.get: keep it
        raise cause
    err = rex.RayTaskError(type_name.rsplit(".", 1)[-1], tb, cause, pid=pid, ip=ip)
    raise err.as_instanceof_cause() from None


STORE_THRESHOLD = 1 << 20  # ray.put values from this many pickled bytes go to the store


class StoredValue:
    """A ray.put value written once into the object store of the driver's host (troupe's
    Cluster.put): its pickle and out-of-band buffers are store objects, and it pickles as
    out-of-band references to them, so every call it is passed to carries the same objects
    (workers on the host map them, other hosts get one copy each) instead of a new copy."""

    def __init__(self, cluster, payload, buffers):
        self.payload = cluster.put(payload) if len(payload) >= STORE_THRESHOLD else payload
        self.buffers = [cluster.put(b) for b in buffers]

    @classmethod
    def of(cls, cluster, value):
        """The StoredValue of `value`, or None when it is small (it then travels inline)."""
        from troupe.ray import _serial

        payload, buffers = _serial.dumps(value)
        if len(payload) + sum(len(b) for b in buffers) < STORE_THRESHOLD:
            return None
        return cls(cluster, payload, buffers)

    def __reduce__(self):
        import pickle

        from troupe.ray import _serial

        payload = self.payload
        if not isinstance(payload, bytes):
            payload = pickle.PickleBuffer(payload)
        return (_serial.loads_parts, (payload, *map(pickle.PickleBuffer, self.buffers)))


class ObjectRef:
    """A reference to a value that a task or actor call will produce (or ray.put stored).
    ``ray.get(ref)`` returns the value; a ref can be passed as an argument (resolved before the
    call when passed at the top level) and awaited from asyncio. Picklable: inside a worker it
    refers to the driver's object."""

    __slots__ = ("_id", "_cell", "_index", "_stored", "__weakref__")

    def __init__(self, ref_id, cell=None, index=None, stored=None):
        self._id = ref_id
        self._cell = cell
        self._index = index
        self._stored = stored  # a StoredValue for a large ray.put value

    def hex(self):
        return self._id

    def binary(self):
        return bytes.fromhex(self._id)

    def __repr__(self):
        return f"ObjectRef({self._id})"

    def __hash__(self):
        return hash((self._id, self._index))

    def __eq__(self, other):
        return isinstance(other, ObjectRef) and (self._id, self._index) == (other._id,
                                                                               other._index)

    def _done(self):
        return self._cell.done()

    def _result(self, timeout=None):
        value = self._cell.result(timeout)
        if self._index is None:
            return value
        if not isinstance(value, (list, tuple)) or len(value) <= self._index:
            raise rex.RayTaskError("num_returns", "", ValueError(
                f"the task was declared with more return values than it returned ({value!r})"))
        return value[self._index]

    def future(self):
        """A concurrent.futures.Future of the value."""
        import concurrent.futures

        out = concurrent.futures.Future()

        def done():
            try:
                out.set_result(self._result(0))
            except BaseException as e:  # noqa: BLE001
                out.set_exception(e)

        self._cell.add_done_callback(done)
        return out

    def __await__(self):
        import asyncio

        return asyncio.wrap_future(self.future()).__await__()

    def __reduce__(self):
        from troupe.ray import _runtime

        return _runtime.reduce_ref(self)


class LeasedObjectRef(ObjectRef):
    """A worker's copy of a ref the driver made for it (see troupe.ray._runtime.leasing): once
    dropped it is given back to the driver with the worker's next API call, unless it was
    pickled to go anywhere but an API call to the driver (a result, another process)."""

    __slots__ = ("_escaped",)

    def __init__(self, ref_id, cell=None, index=None, stored=None):
        super().__init__(ref_id, cell, index, stored)
        self._escaped = False

    def __reduce__(self):
        if not _context.is_sending_to_driver():
            self._escaped = True
        return super().__reduce__()

    def __del__(self):
        if not self._escaped:
            _context.released_leases.append((self._id, self._index))


class ObjectRefGenerator:
    """The refs of a ``num_returns="streaming"`` call, in the order the generator yields them:
    iterate it (each ``next`` blocks until the next item exists) and ray.get each ref."""

    def __init__(self, stream, error_of):
        self._stream = stream
        self._error_of = error_of
        self._ended = False

    def __iter__(self):
        return self

    def __next__(self):
        return self._next(None)

    def _next(self, timeout):
        if self._ended:
            raise StopIteration
        try:
            raw = self._stream.next(timeout)
        except StopIteration:
            self._ended = True
            raise
        except troupe.TimeoutError:
            raise rex.GetTimeoutError(f"no item within {timeout} s") from None
        except troupe.TroupeError as e:
            self._ended = True
            cell = _Cell()
            cell.set_error(self._error_of(e))
            return ObjectRef(new_id(), cell)
        cell = _Cell()
        try:
            cell.set_value(decode_result(raw))
        except Exception as e:  # noqa: BLE001 - the generator raised: the last ref raises it
            self._ended = True
            cell.set_error(e)
        return ObjectRef(new_id(), cell)

    def __reduce__(self):
        from troupe.ray import _runtime

        return (_runtime.restore_generator, (_runtime.export_generator(self),))


class RemoteObjectRefGenerator:
    """An ObjectRefGenerator passed to a task or actor: each ``next`` asks the driver, which
    holds the generator, for its next ref (so the items are shared with whoever else iterates
    the same generator, as Ray's are)."""

    def __init__(self, gen_id):
        self._gen_id = gen_id

    def __iter__(self):
        return self

    def __next__(self):
        return self._next(None)

    def _next(self, timeout):
        from troupe.ray import _api

        return _api.api().generator_next(self._gen_id, timeout)

    def __reduce__(self):
        from troupe.ray import _runtime

        return (_runtime.restore_generator, (self._gen_id,))

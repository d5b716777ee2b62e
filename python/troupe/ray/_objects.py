"""ObjectRef: the future of a value (a call's result, a task's result, or a ray.put value), and
how refs and generators cross processes by id.

A driver's ObjectRef has a Cell (troupe.ray._cells): either bound to a troupe.Future (the call
sent to a worker), or set directly (ray.put, a placement group's readiness, a call that failed
before it was sent). A call waiting for its arguments or its actor has an unbound cell; get()
waits for the binding. A worker's ObjectRef has only an id: its operations go to the driver
(troupe.ray._proxy), which keeps every ref it exported reachable by that id (reduce_ref).
"""

import asyncio
import concurrent.futures
import contextlib
import pickle
import threading

import troupe
from troupe.ray import _cells, _context, _current, _serial
from troupe.ray import exceptions as rex
from troupe.ray._cells import new_id

STORE_THRESHOLD = 1 << 20  # ray.put values from this many pickled bytes go to the store

# A worker's refs have no cell: future() asks the driver for the value on a thread of this pool
# (made at the first use, so that a worker forked from the fork server starts with one thread).
_MAX_FETCH_THREADS = 16
_fetch_pool = None
_fetch_pool_lock = threading.Lock()


def _fetch_in_background(ref):
    """A concurrent.futures.Future of a worker's ref: ray.get of it (by the driver) on a thread
    of the fetch pool, so that an awaiting event loop is not blocked."""
    global _fetch_pool
    with _fetch_pool_lock:
        if _fetch_pool is None:
            _fetch_pool = concurrent.futures.ThreadPoolExecutor(
                _MAX_FETCH_THREADS, thread_name_prefix="troupe-ray-fetch")
    return _fetch_pool.submit(lambda: _current.api().get([ref], None)[0])


class StoredValue:
    """A ray.put value written once into the object store of the driver's host (troupe's
    Cluster.put): its pickle and out-of-band buffers are store objects, and it pickles as
    out-of-band references to them, so every call it is passed to carries the same objects
    (workers on the host map them, other hosts get one copy each) instead of a new copy."""

    def __init__(self, cluster, payload, buffers):
        self.payload = cluster.put(payload) if len(payload) >= STORE_THRESHOLD else payload
        self.buffers = [cluster.put(b) for b in buffers]

    def value(self):
        """The value, unpickled from the store's copies (read-only, zero-copy views)."""
        return _serial.loads_parts(self.payload, *self.buffers)

    def __reduce__(self):
        payload = self.payload
        if not isinstance(payload, bytes):
            payload = pickle.PickleBuffer(payload)
        return (_serial.loads_parts, (payload, *map(pickle.PickleBuffer, self.buffers)))


def put_value(cluster, value):
    """(snapshot, stored) of a ray.put value: the value as ray.get returns it, a copy whose
    NumPy arrays are read-only as Ray's are (later changes to `value` do not reach it), and its
    StoredValue when large (else None). Plain values (None, bool, int, float, str) are their
    own snapshot."""
    if _serial.is_plain(value):
        return value, None
    payload, buffers = _serial.dumps(value)
    if len(payload) + sum(len(b) for b in buffers) < STORE_THRESHOLD:
        return _serial.loads(payload, [bytes(b) for b in buffers]), None
    stored = StoredValue(cluster, payload, buffers)
    return stored.value(), stored


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
        return (isinstance(other, ObjectRef)
                and (self._id, self._index) == (other._id, other._index))

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
        if self._cell is None:  # a worker's ref: the driver has the value
            return _fetch_in_background(self)
        out = concurrent.futures.Future()

        def done():
            try:
                out.set_result(self._result(0))
            except BaseException as e:  # noqa: BLE001
                out.set_exception(e)

        self._cell.add_done_callback(done)
        return out

    def __await__(self):
        return asyncio.wrap_future(self.future()).__await__()

    def __reduce__(self):
        return reduce_ref(self)


class LeasedObjectRef(ObjectRef):
    """A worker's copy of a ref the driver made for it (see leasing below): once
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

    def __aiter__(self):
        return self

    async def __anext__(self):
        """`async for`: each next ref, waited for on a thread so that the loop runs on."""
        ref = await asyncio.get_running_loop().run_in_executor(None, self._next_or_none)
        if ref is None:
            raise StopAsyncIteration
        return ref

    def _next_or_none(self):
        try:
            return self._next(None)
        except StopIteration:
            return None

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
            cell = _cells.Cell()
            cell.set_error(self._error_of(e))
            return ObjectRef(new_id(), cell)
        cell = _cells.Cell()
        try:
            cell.set_value(_cells.decode_result(raw))
        except Exception as e:  # noqa: BLE001 - the generator raised: the last ref raises it
            self._ended = True
            cell.set_error(e)
        return ObjectRef(new_id(), cell)

    def __reduce__(self):
        return (restore_generator, (export_generator(self),))


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
        return _current.api().generator_next(self._gen_id, timeout)

    def __reduce__(self):
        return (restore_generator, (self._gen_id,))


# -- crossing processes by id ---------------------------------------------------------------------
_leasing = threading.local()


@contextlib.contextmanager
def leasing():
    """Within: refs pickled on this thread that no worker has seen yet (the refs a worker's
    put, task submission or actor call just made for it, in the reply) are leased, not pinned:
    the worker's copy is a LeasedObjectRef, which gives the ref back (release_leases) once
    dropped, unless it was pickled to go anywhere but an API call to the driver. Any other
    export pins the ref in `exported` until shutdown."""
    _leasing.on = True
    try:
        yield
    finally:
        _leasing.on = False


def reduce_ref(ref):
    """ObjectRef.__reduce__: the ref crosses by id; the driver keeps it reachable by that id."""
    driver = _current.runtime()
    key = (ref._id, ref._index)
    if ref._cell is not None and driver is not None:
        with driver.export_lock:
            if getattr(_leasing, "on", False) and key not in driver.exported:
                driver.exported[key] = ref
                driver.leased.add(key)
                return (restore_leased_ref, (key,))
            driver.exported[key] = ref
            driver.leased.discard(key)
    return (restore_ref, (key,))


def release_leases(keys):
    """The worker's copies of these leased refs are gone: forget them here (the driver's own
    holders, if any, keep the objects alive). Keys pinned since are kept."""
    driver = _current.runtime()
    with driver.export_lock:
        for key in keys:
            key = tuple(key)
            if key in driver.leased:
                driver.leased.discard(key)
                driver.exported.pop(key, None)


def restore_ref(key):
    driver = _current.runtime()
    if driver is not None and key in driver.exported:
        return driver.exported[key]
    return ObjectRef(key[0], None, key[1])


def restore_leased_ref(key):
    driver = _current.runtime()
    if driver is not None and key in driver.exported:
        return driver.exported[key]
    return LeasedObjectRef(key[0], None, key[1])


def export_generator(gen):
    """Makes the ObjectRefGenerator `gen` reachable by id from workers (kept until shutdown)."""
    driver = _current.runtime()
    if driver is None:
        raise rex.RaySystemError("an ObjectRefGenerator can only be exported by the driver")
    gen_id = getattr(gen, "_export_id", None)
    if gen_id is None:
        gen_id = gen._export_id = new_id()
        driver.generators[gen_id] = gen
    return gen_id


def restore_generator(gen_id):
    driver = _current.runtime()
    if driver is not None and gen_id in driver.generators:
        return driver.generators[gen_id]
    return RemoteObjectRefGenerator(gen_id)

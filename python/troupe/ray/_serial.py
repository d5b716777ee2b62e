"""How troupe.ray moves Python values: pickle protocol 5 with out-of-band buffers (a NumPy array
or bytes-like travels as a raw troupe attachment, through the host's object store when large,
not copied into the pickle), cloudpickle for what plain pickle cannot do (lambdas, classes and
functions of __main__)."""

import pickle

try:
    import cloudpickle
except ImportError:  # pragma: no cover - Debian's python3-cloudpickle is optional
    cloudpickle = None


INLINE_MAX = 1 << 16


class Inline:
    """A small pickle that travels inside troupe's own pickled value (to_value pickles objects
    of other types; the worker unpickles them into bytes), not as a troupe Bytes, which a Python
    worker receives as a NumPy array: a worker that never gets an array never imports NumPy
    (about 0.1 s of CPU per process)."""

    __slots__ = ("data",)

    def __init__(self, data):
        self.data = data

    def __reduce__(self):
        return (Inline, (bytes(self.data),))


def inline(payload, buffers=()):
    """`payload` as an Inline when it is small and has no out-of-band buffers."""
    return Inline(payload) if not buffers and len(payload) <= INLINE_MAX else payload


def data_of(payload):
    """The bytes of a payload inline() made (or the payload itself)."""
    return payload.data if isinstance(payload, Inline) else payload


def dumps(value):
    """(payload bytes, [buffers]) for `value`."""
    buffers = []
    try:
        payload = pickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    except (pickle.PicklingError, AttributeError, TypeError) as plain_error:
        if cloudpickle is None:
            raise TypeError(f"troupe.ray cannot pickle {type(value).__name__}: {plain_error} "
                            "(install cloudpickle for lambdas and __main__ definitions)") from None
        buffers = []
        payload = cloudpickle.dumps(value, protocol=5, buffer_callback=buffers.append)
    return payload, [b.raw() for b in buffers]


def loads(payload, buffers):
    """The value dumps() encoded. Its out-of-band buffers are read-only, as Ray's are: a NumPy
    array argument is a zero-copy view (of the store's mapping, for a large one); copy it to
    write."""
    return pickle.loads(data_of(payload), buffers=[_read_only(b) for b in buffers or ()])


def _read_only(buffer):
    return memoryview(buffer).toreadonly()


def loads_parts(payload, *buffers):
    """The value of a pickle and its out-of-band buffers (a StoredValue in a worker: they are
    the store's read-only mappings)."""
    return pickle.loads(payload, buffers=[_read_only(b) for b in buffers])


def dumps_by_value(obj):
    """A function or class pickled by value (for definitions in __main__)."""
    if cloudpickle is None:
        raise TypeError(f"{getattr(obj, '__qualname__', obj)} is defined in __main__: define it "
                        "in an importable module (or install cloudpickle)")
    return cloudpickle.dumps(obj)


_PLAIN = (type(None), bool, int, float, str)


def is_plain(value):
    """Whether troupe carries `value` natively (no pickling needed on either side)."""
    return type(value) in _PLAIN

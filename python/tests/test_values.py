"""Values: native types, attachments (zero-copy NumPy/torch), pickling and its errors."""

import time

import numpy as np
import pytest

import troupe
from workers import Point

T = 60


@pytest.fixture(scope="module")
def echo():
    with troupe.Cluster(1, num_cpus_per_host=4) as cluster:
        w = cluster.start_worker("workers.Echo", 1, "two", k=3)
        w.ready().result(T)
        yield w


def rt(w, value):
    return w.call("echo", value).result(T)


def test_native_types(echo):
    for v in [None, True, False, 0, -5, 2**62, 1.5, "", "héllo", [1, [2, "x"]], {"a": 1, "b": [None]},
              (1, 2, (3,)), {1: "int key", (2, 3): "tuple key"}, [], {}]:
        out = rt(echo, v)
        assert out == v and type(out) is type(v), v


def test_constructor_positional_and_keyword_args(echo):
    assert echo.call("init_args").result(T) == [[1, "two"], {"k": 3}]


def test_buffers_arrive_as_uint8_arrays(echo):
    for v in [b"\x00\x01abc", bytearray(b"xyz"), memoryview(b"0123456789")[2:5]]:
        out = rt(echo, v)
        assert isinstance(out, np.ndarray) and out.dtype == np.uint8
        assert out.tobytes() == bytes(v)


def test_numpy_arrays_every_dtype(echo):
    arrays = [np.arange(12, dtype=np.float32).reshape(3, 4), np.array(3.5), np.zeros((2, 0, 3)),
              np.array([True, False]), np.arange(6, dtype=np.complex128).reshape(2, 3),
              np.arange(24, dtype=">i4").reshape(2, 3, 4), np.array(["ab", "c"]),
              np.arange(10, dtype=np.uint16)[::3],  # not contiguous: sent as a contiguous copy
              np.array([(1, 2.0)], dtype=[("a", "i4"), ("b", "f8")]),
              np.array(["2020-01-01"], dtype="datetime64[D]")]
    for a in arrays:
        out = rt(echo, a)
        assert isinstance(out, np.ndarray)
        assert out.dtype == a.dtype and out.shape == a.shape
        assert np.array_equal(out, a)


def test_arrays_are_backed_by_the_received_buffer(echo):
    d = echo.call("describe", np.arange(1000, dtype=np.float64)).result(T)
    assert d["type"] == "numpy.ndarray" and d["owndata"] is False and d["root"] == "PyCapsule"
    back = rt(echo, np.arange(1000, dtype=np.float64))
    assert back.flags.owndata is False and back.flags.writeable


def test_torch_tensors(echo):
    torch = pytest.importorskip("torch")
    for t in [torch.arange(6, dtype=torch.float32).reshape(2, 3), torch.tensor([1, 2], dtype=torch.int64),
              torch.ones(3, dtype=torch.bfloat16), torch.arange(8)[::2]]:
        out = rt(echo, t)
        assert isinstance(out, torch.Tensor) and out.dtype == t.dtype and torch.equal(out, t)
    d = echo.call("describe", torch.zeros(4)).result(T)
    assert d["type"] == "torch.Tensor"


def test_other_objects_are_pickled(echo):
    assert rt(echo, Point(1, 2)) == Point(1, 2)
    assert rt(echo, 2**80) == 2**80
    assert rt(echo, {"set": {1, 2}}) == {"set": {1, 2}}


def test_unpicklable_argument_is_named(echo):
    with pytest.raises(troupe.InvalidArgumentError, match=r"argument 'value'.*cannot be pickled"):
        echo.call("echo", value=lambda: 1)


def test_async_methods_overlap(echo):
    # The method thread starts a coroutine method and goes on (troupe._worker.start_coroutine):
    # four naps of 0.5 s end together, and a plain method answers meanwhile.
    start = time.monotonic()
    naps = [echo.call("nap", 0.5) for _ in range(4)]
    assert echo.call("echo", "meanwhile").result(T) == "meanwhile"
    assert time.monotonic() - start < 0.4
    assert troupe.gather(naps, timeout=T) == [0.5] * 4
    assert time.monotonic() - start < 1.5  # one after the other: 2 s
    with pytest.raises(troupe.MethodFailedError, match=r"ValueError: late"):
        echo.call("fail_later", "late").result(T)
    with pytest.raises(troupe.MethodFailedError, match="TypeError"):  # as for a plain method
        echo.call("nap", 0.1, 0.2, 0.3).result(T)


def test_async_and_generator_methods(echo):
    assert echo.call("slow_add", 2, b=3).result(T) == 5
    s = echo.stream("count", 4)
    assert list(s) == [0, 1, 4, 9]
    assert s.done().result(T) == "end"

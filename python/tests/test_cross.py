"""A C++ driver with Python workers, and a Python driver with C++ workers."""

import os
import subprocess
import sys

import numpy as np
import pytest

import troupe

T = 60
HERE = os.path.dirname(os.path.abspath(__file__))


def cross_exe():
    exe = os.environ.get("TROUPE_PY_CROSS") or os.path.join(
        os.path.dirname(os.path.dirname(troupe.__file__)), "troupe_py_cross")
    if not os.path.exists(exe):
        pytest.skip(f"no {exe} (built with the tests by CMake)")
    return exe


def test_cpp_driver_with_python_workers():
    paths = ":".join([os.path.dirname(os.path.dirname(troupe.__file__)), HERE])
    out = subprocess.run([cross_exe(), "drive", sys.executable, paths], capture_output=True,
                         text=True, timeout=120, stdin=subprocess.DEVNULL)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "cross ok" in out.stdout


def test_python_driver_with_cpp_workers():
    with troupe.Cluster(2, num_cpus_per_host=2, executables={"CppAdder": cross_exe()}) as c:
        vc = troupe.VirtualCluster([1, 1], use_gpus=False, cluster=c, name="cpp")
        g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("CppAdder", base=10), name_prefix="cpp")
        f = g.run_all_workers_sharded_data("add", a=[1, 2], in_sharded_axes=["dp"],
                                           common_kwargs={"b": 100})
        assert (f.called_workers, f.return_from_workers) == ([0, 1], [0, 1])
        assert g.get_all_worker_results(f) == [111, 112]
        assert g.run_single_worker_single_data("size_of", 1, data=b"x" * 1000).result(T) == 1000
        out = g.run_single_worker_single_data("make_bytes", 0, n=5).result(T)
        assert isinstance(out, np.ndarray) and out.tolist() == [7] * 5
        assert g.run_single_worker_single_data("scale", 0, xs=[1.0, 2], k=2).result(T) == [2.0, 4.0]
        with pytest.raises(troupe.InvalidArgumentError, match="'a'"):
            g.run_single_worker_single_data("add", 0, a="x", b=1).result(T)
        with pytest.raises(troupe.InvalidArgumentError, match="__arg0|keyword"):
            g.run_single_worker_single_data("add", 0, 1, 2).result(T)
        g.shutdown()
        vc.shutdown()

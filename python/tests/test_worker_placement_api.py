"""The public Python API that troupe.ray builds on: Cluster.start_worker(gpus=[...]) and
troupe.set_python_executable (real processes)."""

import os
import sys

import troupe

import workers


def test_start_worker_with_gpu_ids_and_a_later_interpreter(tmp_path):
    python = tmp_path / "python3-alias"
    os.symlink(sys.executable, python)
    troupe.set_python_executable("workers.Echo", str(python))
    with troupe.Cluster(num_hosts=1, num_gpus_per_host=3, num_cpus_per_host=2) as c:
        a = c.start_worker(workers.Rank, gpus=[2], env={"RANK": "0"})
        b = c.start_worker(workers.Rank, gpus=[0, 2], env={"RANK": "1"})  # ids may be shared
        assert a.call("env", ["CUDA_VISIBLE_DEVICES"]).result(30) == {"CUDA_VISIBLE_DEVICES": "2"}
        assert b.call("env", ["CUDA_VISIBLE_DEVICES"]).result(30) == \
            {"CUDA_VISIBLE_DEVICES": "0,2"}
        e = c.start_worker(workers.Echo)
        # The worker runs the interpreter named after the Cluster was made.
        assert e.call("echo", 1).result(30) == 1
        with open(f"/proc/{e.pid}/cmdline", "rb") as f:
            assert f.read().split(b"\0")[0] == str(python).encode()

"""A 256 MiB NumPy array replicated to 4 workers: intact, and not copied once per worker."""

import hashlib

import numpy as np

import troupe

T = 170


def peak_rss_bytes():
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    raise RuntimeError("no VmHWM")


def test_256mib_replicated_to_4_workers(vc):
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Echo"), workers_per_node=2,
                           name_prefix="big")
    data = np.arange(256 * 1024 * 1024 // 8, dtype=np.uint64)
    want = hashlib.sha256(memoryview(data).cast("B")).hexdigest()
    before = peak_rss_bytes()
    sums = g.get_all_worker_results(g.run_all_workers_single_data("checksum", data), timeout=T)
    grew = peak_rss_bytes() - before
    assert sums == [want] * 4
    # One copy per worker would be 1 GiB; the encoded arguments share the array's buffer.
    assert grew < 128 * 1024 * 1024, f"driver peak memory grew by {grew >> 20} MiB"
    g.shutdown()

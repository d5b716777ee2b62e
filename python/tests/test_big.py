"""Large NumPy arrays as arguments: a 256 MiB array replicated to 4 workers arrives intact and is
not copied once per worker; a worker may write into the one it got."""

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


def test_a_worker_writes_into_its_own_copy_of_a_large_argument(vc):
    # 2 MiB: over the object store threshold (1 MiB), so the workers on the driver's host map the
    # store's object; writing into it changes their copy only.
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Echo"), workers_per_node=2,
                           name_prefix="cow")
    n = 2 * 1024 * 1024 // 8
    data = np.arange(n, dtype=np.uint64)
    want = hashlib.sha256(memoryview(data).cast("B")).hexdigest()
    doubled = g.get_all_worker_results(g.run_all_workers_single_data("double_in_place", data),
                                       timeout=T)
    assert doubled == [n * (n - 1)] * 4  # 2 * (0 + 1 + ... + n-1)
    # The driver's array and the object the next call carries are as they were.
    assert hashlib.sha256(memoryview(data).cast("B")).hexdigest() == want
    sums = g.get_all_worker_results(g.run_all_workers_single_data("checksum", data), timeout=T)
    assert sums == [want] * 4
    g.shutdown()

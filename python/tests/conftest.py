"""Shared fixtures: a deadline on every test, and clusters shared by the tests of a module."""

import faulthandler
import os
import signal
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

DEADLINE_S = int(os.environ.get("TROUPE_PYTEST_DEADLINE", "180"))


@pytest.fixture(autouse=True)
def deadline():
    """Fails a test that runs past DEADLINE_S seconds (and dumps every thread's stack)."""

    def expired(signum, frame):
        faulthandler.dump_traceback(all_threads=True)
        raise TimeoutError(f"test exceeded its {DEADLINE_S} s deadline")

    old = signal.signal(signal.SIGALRM, expired)
    signal.alarm(DEADLINE_S)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


@pytest.fixture(scope="session")
def vc():
    """2 simulated hosts with 4 bundles each (no GPUs), for up to 4 groups at a time."""
    import troupe

    cluster = troupe.VirtualCluster(bundle_ct_per_node_list=[4, 4], use_gpus=False,
                                    max_colocated_worker_groups=4, name="pytest")
    yield cluster
    cluster.shutdown()

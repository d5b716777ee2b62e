"""Stacks of a hang from Python: group.dump_stacks() shows every Python thread's stack, also of a
thread that holds the GIL in C code, with the worker's rank, host and call."""

import os
import tempfile
import time

import troupe

T = 30


def test_dump_stacks_shows_a_pure_python_thread_and_one_holding_the_gil_in_c(vc):
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.StuckThreads"), workers_per_node=1,
                           name_prefix="stuck")
    try:
        with tempfile.TemporaryDirectory() as tmp:
            holding = os.path.join(tmp, "holding")
            g.run_single_worker_single_data("start", 0, hold_seconds=4,
                                            holding_path=holding).result(T)
            deadline = time.monotonic() + T
            while not os.path.exists(holding) and time.monotonic() < deadline:
                time.sleep(0.01)
            assert os.path.exists(holding)
            time.sleep(0.1)  # from its file to its call of libc's sleep: a few lines of Python
            dumps = g.dump_stacks(file=None)
            if os.environ.get("STACKS_TEST_SHOW"):
                print(dumps[0]["text"])
        assert [d["rank"] for d in dumps] == [0, 1]
        d = dumps[0]
        assert d["errors"] == [], d["text"]
        assert " in spin_in_python" in d["python"], d["text"]
        assert " in hold_gil_in_c" in d["python"], d["text"]
        assert d["call"] == ""  # start() returned: the worker runs no call
        assert "=== worker " + d["name"] + " (group " in d["text"]
        assert "--- Python stacks ---" in d["text"]
        assert "--- native stacks ---" in d["text"]
        # The other worker has no stuck threads.
        assert " in spin_in_python" not in dumps[1]["python"], dumps[1]["text"]
    finally:
        g.shutdown(grace=1.0)


def test_a_timed_out_multi_worker_future_names_the_workers_that_did_not_answer(vc):
    g = troupe.WorkerGroup(vc, troupe.WorkerBuilder("workers.Echo"), workers_per_node=1,
                           name_prefix="late")
    try:
        f = g.run_all_workers_multiple_data("spin", seconds=[0, 3])
        try:
            f.get_results(timeout=0.5)
            raise AssertionError("get_results returned while worker 1 spins")
        except troupe.TimeoutError as e:
            message = str(e)
        assert "from 1 of 2 workers to the call of 'spin' (sent " in message, message
        assert "\n  worker 'late-1-0' (group late, rank 1, class workers.Echo, host " in message, \
            message
        assert ", rank 0," not in message, message
        f.get_results(timeout=T)
    finally:
        g.shutdown()

"""The worker class of python_fork_bench.py: its module imports a heavy module (BENCH_HEAVY)."""

import importlib
import os

HEAVY = importlib.import_module(os.environ.get("BENCH_HEAVY", "torch"))


class Heavy:
    def ping(self):
        return os.getpid()


def child_main(conn):
    """multiprocessing target: make the class's object, answer once, wait to be told to exit."""
    obj = Heavy()
    conn.send(obj.ping())
    conn.recv()

"""Worker classes for the Python test suite (imported by name in worker processes)."""

import asyncio
import hashlib
import os
import time


class Rank:
    """Reports who was called with what."""

    def __init__(self, tag="t"):
        self.rank = int(os.environ["RANK"])
        self.tag = tag

    def who(self, x=None, y=None, c=None):
        return {"rank": self.rank, "x": x, "y": y, "c": c}

    def pos(self, *args, c=None):
        return {"rank": self.rank, "args": list(args), "c": c}

    def env(self, names):
        return {n: os.environ.get(n) for n in names}

    def fail(self, message):
        raise ValueError(message)

    def die(self):
        os._exit(7)

    def pid(self):
        return os.getpid()

    def forked_with(self, module):
        """[whether the Python fork server forked this worker, whether `module` is imported]."""
        import sys

        fork_server = sys.modules.get("troupe._fork_server")
        return [bool(fork_server and fork_server.forked), module in sys.modules]

    def items(self, n):
        for i in range(n):
            yield self.rank * 10 + i
        return self.rank


class Echo:
    """Returns what it gets, and facts about it."""

    def __init__(self, *args, **kwargs):
        self.args = args
        self.kwargs = kwargs

    def init_args(self):
        return [list(self.args), self.kwargs]

    def echo(self, value):
        return value

    def describe(self, value):
        import numpy as np

        base = value
        while getattr(base, "base", None) is not None:
            base = base.base
        return {
            "type": type(value).__module__ + "." + type(value).__qualname__,
            "owndata": bool(value.flags.owndata) if isinstance(value, np.ndarray) else None,
            "root": type(base).__name__,
        }

    def checksum(self, data):
        return hashlib.sha256(memoryview(data).cast("B")).hexdigest()

    def double_in_place(self, data):
        """Writes into its argument (a NumPy array): returns the new sum."""
        data *= 2
        return int(data.sum())

    async def slow_add(self, a, b):
        await asyncio.sleep(0.01)
        return a + b

    async def nap(self, seconds):
        await asyncio.sleep(seconds)
        return seconds

    async def fail_later(self, message):
        await asyncio.sleep(0.01)
        raise ValueError(message)

    def count(self, n):
        for i in range(n):
            yield i * i
        return "end"

    def spin(self, seconds, started_path=None):
        """Holds the GIL in pure Python for `seconds`; with `started_path`, first creates that
        file, so that the caller knows the spin has begun."""
        if started_path is not None:
            with open(started_path, "w"):
                pass
        end = time.monotonic() + seconds
        n = 0
        while time.monotonic() < end:
            n += 1
        return n


class Point:
    """A plain object, travelling pickled."""

    def __init__(self, x, y):
        self.x, self.y = x, y

    def __eq__(self, other):
        return isinstance(other, Point) and (self.x, self.y) == (other.x, other.y)


class Configured:
    """Has a configure_worker hook, as the reference's worker classes do."""

    @classmethod
    def configure_worker(cls, num_gpus, bundle_indices=None, num_gpus_per_node=None):
        env = {"CONFIGURED": f"gpus={num_gpus} owner={bundle_indices is not None}"}
        return ({"num_gpus": 0}, env, {"greeting": "from-hook"}, None)

    def __init__(self, greeting="default"):
        self.greeting = greeting

    def facts(self):
        return {
            "greeting": self.greeting,
            "CONFIGURED": os.environ.get("CONFIGURED"),
            "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        }


class BadInit:
    def __init__(self):
        raise RuntimeError("no thanks")


class TorchRank:
    """torch.distributed as a real client: gloo rendezvous on MASTER_ADDR:MASTER_PORT."""

    def all_reduce(self):
        import torch
        import torch.distributed as dist

        dist.init_process_group("gloo", init_method="env://")
        t = torch.tensor([float(dist.get_rank() + 1)])
        dist.all_reduce(t)
        out = {"rank": dist.get_rank(), "world": dist.get_world_size(), "sum": t.item(),
               "port": int(os.environ["MASTER_PORT"])}
        dist.destroy_process_group()
        return out


def spin_in_python(started):
    """A thread stuck in a pure-Python function (for ``dump_stacks``)."""
    started.set()
    while True:
        time.sleep(0.01)


def hold_gil_in_c(seconds, holding_path):
    """A thread that holds the GIL in C code for `seconds`: libc's sleep called through
    ctypes.PyDLL, which keeps the GIL. Creates `holding_path` right before."""
    import ctypes

    libc = ctypes.PyDLL("libc.so.6")
    with open(holding_path, "w"):
        pass
    libc.sleep(seconds)


class StuckThreads:
    """Starts two stuck threads (see spin_in_python, hold_gil_in_c) for ``dump_stacks``."""

    def start(self, hold_seconds, holding_path):
        import threading

        started = threading.Event()
        threading.Thread(target=spin_in_python, args=(started,), daemon=True).start()
        started.wait()
        # The GIL is taken after this method returned (its reply needs no GIL once it returned),
        # so that the call is answered.
        threading.Timer(0.1, hold_gil_in_c, args=(hold_seconds, holding_path)).start()
        return True

"""The classes and functions Ray's microbenchmark runs (ray/_private/ray_perf.py of the Ray
wheel in .venv-peers), with the same bodies, as an importable module so that Ray's and
troupe.ray's workers both import them by name. `ray` is whichever the driver imported: troupe's
when the driver called troupe.ray.install() first (its workers do the same).

Two of ray_perf.py's functions are closures inside its main() (do_put_small, do_put, work,
async_actor_work): here they are module functions with the same bodies; their free variables
(n, n_cpu) are the module constants below, set to the values main() gives them.

Additions of the side-by-side bench (not in ray_perf.py): Reader (the 1 GiB row)."""

import asyncio
import multiprocessing

import numpy as np

import ray

# ray_perf.main()'s values for the closures' free variables.
n = 5000
n_cpu = multiprocessing.cpu_count() // 2


@ray.remote(num_cpus=0)
class Actor:
    def small_value(self):
        return b"ok"

    def small_value_arg(self, x):
        return b"ok"

    def small_value_batch(self, n):
        ray.get([small_value.remote() for _ in range(n)])


@ray.remote
class AsyncActor:
    async def small_value(self):
        return b"ok"

    async def small_value_with_arg(self, x):
        return b"ok"

    async def small_value_batch(self, n):
        await asyncio.wait([small_value.remote() for _ in range(n)])


@ray.remote(num_cpus=0)
class Client:
    def __init__(self, servers):
        if not isinstance(servers, list):
            servers = [servers]
        self.servers = servers

    def small_value_batch(self, n):
        results = []
        for s in self.servers:
            results.extend([s.small_value.remote() for _ in range(n)])
        ray.get(results)

    def small_value_batch_arg(self, n):
        x = ray.put(0)
        results = []
        for s in self.servers:
            results.extend([s.small_value_arg.remote(x) for _ in range(n)])
        ray.get(results)


@ray.remote
def small_value():
    return b"ok"


@ray.remote
def small_value_batch(n):
    submitted = [small_value.remote() for _ in range(n)]
    ray.get(submitted)
    return 0


@ray.remote
def create_object_containing_ref():
    obj_refs = []
    for _ in range(10000):
        obj_refs.append(ray.put(1))
    return obj_refs


@ray.remote
def do_put_small():
    for _ in range(100):
        ray.put(0)


@ray.remote
def do_put():
    for _ in range(10):
        ray.put(np.zeros(10 * 1024 * 1024, dtype=np.int64))


@ray.remote
def work(actors):
    ray.get([actors[i % n_cpu].small_value.remote() for i in range(n)])


@ray.remote
def async_actor_work(actors):
    ray.get([actors[i % n_cpu].small_value.remote() for i in range(n)])


@ray.remote(num_cpus=0)
class Reader:
    """The 1 GiB row's reader: reads the whole array (a checksum of its 64-bit words)."""

    def ready(self):
        return b"ok"

    def checksum(self, arr):
        return int(arr.view(np.uint64).sum(dtype=np.uint64))

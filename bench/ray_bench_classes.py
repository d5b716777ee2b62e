"""The class ray_bench.py creates as actors and as native workers: a small class in a module that
imports nothing, so that a worker's start is the class's, not the imports of the bench's own
module (argparse, statistics: about 6 ms of CPU per worker on 2 cores). Both sides import it by
this name."""

from troupe import ray


class Noop:
    def noop(self):
        return None


RayNoop = ray.remote(Noop)

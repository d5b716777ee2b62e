import os

import ray

ray.init(num_cpus=1)


@ray.remote
class Tally:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1
        return self.n


tally = Tally.remote()


@ray.remote(max_retries=2)
def crashes_once():
    if ray.get(tally.bump.remote()) == 1:
        os._exit(1)  # the worker dies: a system failure, retried
    return "survived a worker crash"


print(ray.get(crashes_once.remote()))


@ray.remote(max_retries=0)
def crashes():
    os._exit(1)


try:
    ray.get(crashes.remote())
except ray.exceptions.WorkerCrashedError as e:
    print(type(e).__name__)
ray.shutdown()

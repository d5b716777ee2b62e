import threading

import ray

ray.init(num_cpus=1)


@ray.remote(concurrency_groups={"pair": 2})
class Threads:
    def __init__(self):
        self.barrier = threading.Barrier(2, timeout=30)

    @ray.method(concurrency_group="pair")
    def together(self, i):
        self.barrier.wait()
        return i

    def alone(self):
        return "default group, one thread"


t = Threads.remote()
print(ray.get([t.together.remote(1), t.together.remote(2)]))
print(ray.get(t.alone.remote()))
ray.shutdown()

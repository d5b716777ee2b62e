import threading

import ray

ray.init(num_cpus=1)


@ray.remote(max_concurrency=3)
class Threaded:
    def __init__(self):
        self.barrier = threading.Barrier(3, timeout=30)

    def meet(self, i):
        self.barrier.wait()  # only passes when three calls run at once
        return i, threading.current_thread() is not threading.main_thread()


t = Threaded.remote()
print(ray.get([t.meet.remote(i) for i in range(3)]))


@ray.remote
class Serial:
    def __init__(self):
        self.active = 0
        self.most = 0

    def step(self):
        self.active += 1
        self.most = max(self.most, self.active)
        self.active -= 1
        return self.most


s = Serial.remote()
print(ray.get([s.step.remote() for _ in range(10)])[-1])
ray.shutdown()

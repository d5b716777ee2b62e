import ray

ray.init(num_cpus=2)


@ray.remote
class Counter:
    def __init__(self, start=0):
        self.n = start

    def incr(self, by=1):
        self.n += by
        return self.n

    def get(self):
        return self.n


c = Counter.remote(10)
refs = [c.incr.remote() for _ in range(5)]
print(ray.get(refs))
print(ray.get(c.incr.remote(by=5)), ray.get(c.get.remote()))
d = Counter.options(num_cpus=1).remote()
print(ray.get(d.incr.remote(ray.put(3))))
print(ray.get(c.get.remote()) != ray.get(d.get.remote()))
print(repr(c).startswith("Actor(Counter"))
ray.shutdown()

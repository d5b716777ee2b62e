import numpy as np

import ray

ray.init(num_cpus=2)


@ray.remote
class Buffer:
    def __init__(self):
        self.arrays = []

    def add(self, a):
        self.arrays.append(a)
        return a.flags.writeable

    def add_copy(self, a):
        c = a.copy()
        c += 1
        self.arrays.append(c)
        return float(c.sum())

    def total(self):
        return float(sum(a.sum() for a in self.arrays))

    def mutate(self, a):
        try:
            a[0] = 1
            return "mutated"
        except ValueError as e:
            return f"read-only: {type(e).__name__}"


b = Buffer.remote()
arr = np.zeros(1_000_000, dtype=np.float32)
print(ray.get(b.add.remote(arr)))
print(ray.get(b.add_copy.remote(ray.put(arr))))
print(ray.get(b.total.remote()))
print(ray.get(b.mutate.remote(ray.put(arr))))
print(ray.get(b.mutate.remote(np.zeros(10))))
ray.shutdown()

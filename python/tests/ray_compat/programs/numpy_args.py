import numpy as np

import ray

ray.init(num_cpus=2)


@ray.remote
def stats(a):
    return a.shape, a.dtype.str, float(a.sum()), bool(a.flags.writeable)


@ray.remote
def scale(a, k):
    return a * k


big = np.arange(4_000_000, dtype=np.float64)  # 32 MB
print(ray.get(stats.remote(big)))
ref = ray.put(big)
print(ray.get([stats.remote(ref) for _ in range(3)]))
out = ray.get(scale.remote(ref, 2.0))
print(type(out).__name__, out.shape, out[:3].tolist(), out[-1])
got = ray.get(ref)
print(got.flags.writeable, np.array_equal(got, big))
small = np.ones((3, 3), dtype=np.int32)
print(ray.get(stats.remote(small)))
print(ray.get(stats.remote({"inside": big}["inside"])))
ray.shutdown()

# timeout: 60
import ray

ray.init(num_cpus=2)


@ray.remote
def tiny(x):
    return x


refs = [tiny.remote(i) for i in range(100_000)]
print(sum(ray.get(refs)))
ray.shutdown()

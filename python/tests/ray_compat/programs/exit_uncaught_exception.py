# compare: stderr_last
import ray

ray.init(num_cpus=2)


@ray.remote
def f(x):
    return x + 1


print(ray.get([f.remote(i) for i in range(4)]))
raise RuntimeError("the driver gave up")

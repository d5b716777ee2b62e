# compare: stderr_last
import ray

ray.init(num_cpus=1)


@ray.remote
def bad():
    raise ZeroDivisionError("no dividing by zero here")


print("before")
ray.get(bad.remote())

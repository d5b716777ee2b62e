# xfail: num_returns='dynamic' is refused (use 'streaming')
import ray

ray.init(num_cpus=1)


@ray.remote(num_returns="dynamic")
def split(n):
    for i in range(n):
        yield i * i


ref = split.remote(4)
print(type(ref).__name__)
gen = ray.get(ref)
print(type(gen).__name__)
refs = list(gen)
print(len(refs), ray.get(refs))


@ray.remote
def consume(gen):  # a top-level ref argument arrives resolved: the generator itself
    return type(gen).__name__, sum(ray.get(list(gen)))


print(ray.get(consume.remote(split.remote(3))))
ray.shutdown()

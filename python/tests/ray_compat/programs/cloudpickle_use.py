import ray

ray.init(num_cpus=1)
square = ray.cloudpickle.loads(ray.cloudpickle.dumps(lambda x: x * x))
print(square(7))


class Local:
    def __init__(self, v):
        self.v = v


obj = ray.cloudpickle.loads(ray.cloudpickle.dumps(Local(3)))
print(type(obj).__name__, obj.v)


@ray.remote
def apply(blob, x):
    import ray

    return ray.cloudpickle.loads(blob)(x)


print(ray.get(apply.remote(ray.cloudpickle.dumps(lambda x: x + 100), 1)))
ray.shutdown()

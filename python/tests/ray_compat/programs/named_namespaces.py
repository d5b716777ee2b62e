import ray

ray.init(num_cpus=1, namespace="one")


@ray.remote
class Tag:
    def __init__(self, t):
        self.t = t

    def tag(self):
        return self.t


a = Tag.options(name="tag").remote("in one")
b = Tag.options(name="tag", namespace="two").remote("in two")
print(ray.get(ray.get_actor("tag").tag.remote()))
print(ray.get(ray.get_actor("tag", namespace="two").tag.remote()))
print(ray.get_runtime_context().namespace)
ray.shutdown()

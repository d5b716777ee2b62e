import ray

ray.init(num_cpus=2)


@ray.remote
def f(x):
    return x * 2


@ray.remote
class A:
    def ping(self):
        return "pong"


print(ray.get(f.remote(21)))
a = A.remote()
print(ray.get(a.ping.remote()))
pending = [f.remote(i) for i in range(20)]  # still in flight at exit

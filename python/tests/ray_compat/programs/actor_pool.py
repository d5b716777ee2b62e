import ray
from ray.util import ActorPool

ray.init(num_cpus=2)


@ray.remote
class Doubler:
    def double(self, v):
        return 2 * v


pool = ActorPool([Doubler.remote(), Doubler.remote()])
print(list(pool.map(lambda a, v: a.double.remote(v), [1, 2, 3, 4])))
print(sorted(pool.map_unordered(lambda a, v: a.double.remote(v), range(6))))
pool.submit(lambda a, v: a.double.remote(v), 10)
pool.submit(lambda a, v: a.double.remote(v), 20)
pool.submit(lambda a, v: a.double.remote(v), 30)
print(pool.has_next(), pool.has_free())
print(pool.get_next(), pool.get_next(), pool.get_next())
print(pool.has_next(), pool.has_free())
try:
    pool.get_next()
except StopIteration:
    print("StopIteration when empty")
extra = Doubler.remote()
pool.push(extra)
print(pool.pop_idle() is not None)
ray.shutdown()

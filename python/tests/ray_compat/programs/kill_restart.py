# xfail: ray.kill here is synchronous: the next call reaches the restarted actor (fresh state, 1); Ray 2.60's kill had not landed yet (3)
import ray

ray.init(num_cpus=1)


@ray.remote(max_restarts=1)
class Revivable:
    def __init__(self):
        self.n = 0

    def bump(self):
        self.n += 1
        return self.n


r = Revivable.remote()
print(ray.get([r.bump.remote(), r.bump.remote()]))
ray.kill(r, no_restart=False)
print("restarted with fresh state:", ray.get(r.bump.remote(), timeout=60))
ray.kill(r, no_restart=True)
try:
    ray.get(r.bump.remote())
except ray.exceptions.RayActorError as e:
    print("no_restart=True ends it:", type(e).__name__)
ray.shutdown()

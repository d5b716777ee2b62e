import ray

ray.init(num_cpus=1)


@ray.remote
class Victim:
    def ping(self):
        return "pong"


v = Victim.remote()
print(ray.get(v.ping.remote()))
ray.kill(v)
try:
    ray.get(v.ping.remote())
except ray.exceptions.RayActorError as e:
    print(type(e).__name__, isinstance(e, ray.exceptions.ActorDiedError))
try:
    ray.kill("not an actor")
except Exception as e:
    print("kill of a non-actor:", type(e).__name__)


@ray.remote
def t():
    return 1


try:
    ray.kill(t.remote())
except Exception as e:
    print("kill of a ref:", type(e).__name__)
ray.shutdown()

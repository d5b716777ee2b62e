import ray

ray.init(num_cpus=1)


@ray.remote
class Broken:
    def __init__(self):
        raise RuntimeError("cannot start")

    def ping(self):
        return "pong"


b = Broken.remote()
for _ in range(2):
    try:
        ray.get(b.ping.remote())
    except ray.exceptions.RayActorError as e:
        print(type(e).__name__, isinstance(e, ray.exceptions.ActorDiedError))
        print("names the creation task:", "creation task" in str(e))
        print("names the error:", "cannot start" in str(e))
ray.shutdown()

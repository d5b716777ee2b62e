import ray

ray.init(num_cpus=1, namespace="jobs")


@ray.remote
class Daemon:
    def ping(self):
        return "alive"


def start():
    Daemon.options(name="daemon", lifetime="detached").remote()


start()  # the driver keeps no handle: a detached actor lives on
print(ray.get(ray.get_actor("daemon").ping.remote()))
d = ray.get_actor("daemon", namespace="jobs")
print(ray.get(d.ping.remote()))
try:
    Daemon.options(name="x", lifetime="forever").remote()
except ValueError as e:
    print("bad lifetime ->", type(e).__name__)
ray.kill(d)
try:
    ray.get(d.ping.remote())
except ray.exceptions.RayActorError:
    print("killed")
ray.shutdown()

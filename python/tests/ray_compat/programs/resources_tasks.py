import os
import tempfile
import time

import ray

ray.init(num_cpus=4)


@ray.remote(num_cpus=2)
class Holder:
    def ping(self):
        return 1


@ray.remote(num_cpus=1)
def hold(path):
    while not os.path.exists(path):  # released by the driver creating the file
        time.sleep(0.01)
    return "released"


def cpu_when(pred):
    deadline = time.monotonic() + 30
    while True:
        cpu = ray.available_resources().get("CPU", 0)
        if pred(cpu) or time.monotonic() > deadline:
            return cpu
        time.sleep(0.05)


print(cpu_when(lambda c: c == 4))
h = Holder.remote()
ray.get(h.ping.remote())
print("an actor with num_cpus=2 holds 2:", cpu_when(lambda c: c == 2))
path = os.path.join(tempfile.mkdtemp(), "go")
ref = hold.remote(path)
print("a running task holds 1:", cpu_when(lambda c: c == 1))
open(path, "w").close()
print(ray.get(ref))
ray.kill(h)
print("all back:", cpu_when(lambda c: c == 4))
ray.shutdown()

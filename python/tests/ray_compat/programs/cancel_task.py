import os
import tempfile
import time

import ray

ray.init(num_cpus=1)


@ray.remote
def spin(path):
    open(path, "w").close()  # tells the driver it is running
    while True:
        time.sleep(0.01)


@ray.remote
def queued():
    return "never"


started = os.path.join(tempfile.mkdtemp(), "started")
running = spin.remote(started)
waiting = queued.remote()  # no CPU left: it waits behind `running`
while not os.path.exists(started):
    time.sleep(0.01)
ray.cancel(waiting)
try:
    ray.get(waiting, timeout=60)
except ray.exceptions.TaskCancelledError as e:
    print("queued task:", type(e).__name__)
ray.cancel(running)
try:
    ray.get(running, timeout=60)
except ray.exceptions.TaskCancelledError as e:
    print("running task:", type(e).__name__)


@ray.remote
def after():
    return "the worker is free again"


print(ray.get(after.remote(), timeout=60))


@ray.remote
def quick():
    return 1


done = quick.remote()
ray.get(done)
ray.cancel(done)
print("cancel of a finished task:", ray.get(done))
ray.shutdown()

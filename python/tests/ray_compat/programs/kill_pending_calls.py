import asyncio

import ray

ray.init(num_cpus=1)


@ray.remote
class Hang:
    async def forever(self):
        await asyncio.Event().wait()

    async def ping(self):
        return "pong"


h = Hang.remote()
print(ray.get(h.ping.remote()))
pending = [h.forever.remote() for _ in range(3)]
ray.kill(h)
for ref in pending:
    try:
        ray.get(ref, timeout=60)
    except ray.exceptions.RayActorError as e:
        print("pending call fails:", type(e).__name__)
ray.shutdown()

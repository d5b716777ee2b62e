import asyncio

import ray

ray.init(num_cpus=1)


@ray.remote
class Rendezvous:
    """Each call waits until `n` calls are inside at once: they can only finish if they
    overlap on the actor's event loop."""

    def __init__(self, n):
        self.n = n
        self.arrived = 0
        self.all_in = asyncio.Event()

    async def meet(self, i):
        self.arrived += 1
        if self.arrived == self.n:
            self.all_in.set()
        await self.all_in.wait()
        await asyncio.sleep(0)
        return i

    def sync_method(self):
        return "sync methods of an async actor run on its loop too"


r = Rendezvous.remote(5)
print(ray.get([r.meet.remote(i) for i in range(5)], timeout=60))
print(ray.get(r.sync_method.remote()))
ray.shutdown()

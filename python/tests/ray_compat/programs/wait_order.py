import asyncio

import ray

ray.init(num_cpus=4)


@ray.remote
class Gate:
    """Holds calls until opened (an asyncio actor)."""

    def __init__(self):
        self.events = {}

    def _event(self, key):
        return self.events.setdefault(key, asyncio.Event())

    async def wait(self, key):
        await self._event(key).wait()
        return key

    async def open(self, key):
        self._event(key).set()


gate = Gate.remote()
refs = [gate.wait.remote(k) for k in ("a", "b", "c", "d")]
ready, rest = ray.wait(refs, timeout=0.2)
print("none ready:", len(ready), len(rest))
ray.get(gate.open.remote("c"))
ready, rest = ray.wait(refs, num_returns=1)
print("first:", ray.get(ready), [refs.index(r) for r in rest])
ray.get([gate.open.remote(k) for k in ("a", "d")])
ray.get([refs[0], refs[3]])
ready, rest = ray.wait(refs, num_returns=3)
print("three in input order:", ray.get(ready), [refs.index(r) for r in rest])
ready, rest = ray.wait(refs, num_returns=2)
# Which two of the three done ones Ray returns is not defined: only that they are done.
print("two of three done:", len(ready), set(ray.get(ready)) <= {"a", "c", "d"}, len(rest))
ray.get(gate.open.remote("b"))
ready, rest = ray.wait(refs, num_returns=4)
print("all:", ray.get(ready), rest)
ray.shutdown()

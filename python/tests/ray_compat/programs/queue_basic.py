import ray
from ray.util.queue import Empty, Full, Queue

ray.init(num_cpus=2)
q = Queue(maxsize=3)
q.put(1)
q.put_nowait(2)
print(q.qsize(), q.size(), q.empty(), q.full(), len(q))
q.put(3)
print(q.full())
try:
    q.put(4, block=False)
except Full:
    print("Full")
try:
    q.put(4, timeout=0.1)
except Full:
    print("Full after timeout")
print(q.get(), q.get_nowait(), q.get(timeout=1))
try:
    q.get(block=False)
except Empty:
    print("Empty")
try:
    q.get(timeout=0.1)
except Empty:
    print("Empty after timeout")
q.put_nowait_batch([5, 6])
print(q.get_nowait_batch(2))


@ray.remote
def producer(queue, n):
    for i in range(n):
        queue.put(i)
    return "produced"


@ray.remote
class Consumer:
    def take(self, queue, n):
        return [queue.get(timeout=30) for _ in range(n)]


q2 = Queue()
c = Consumer.remote()
taken = c.take.remote(q2, 5)
print(ray.get(producer.remote(q2, 5)), ray.get(taken))
q2.shutdown()
ray.shutdown()

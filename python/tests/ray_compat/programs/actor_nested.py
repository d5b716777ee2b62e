import ray

ray.init(num_cpus=4)


@ray.remote
class Worker:
    def __init__(self, rank):
        self.rank = rank

    def work(self, x):
        return self.rank * 100 + x


@ray.remote
class Supervisor:
    def __init__(self, n):
        self.workers = [Worker.remote(i) for i in range(n)]

    def run(self, x):
        return ray.get([w.work.remote(x) for w in self.workers])

    def handles(self):
        return self.workers


sup = Supervisor.remote(3)
print(ray.get(sup.run.remote(7)))
ws = ray.get(sup.handles.remote())
print(len(ws), ray.get(ws[2].work.remote(1)))


@ray.remote
def make_and_use():
    w = Worker.remote(9)
    return ray.get(w.work.remote(9))


print(ray.get(make_and_use.remote()))
ray.shutdown()

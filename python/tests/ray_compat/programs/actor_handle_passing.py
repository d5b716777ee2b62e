import ray

ray.init(num_cpus=2)


@ray.remote
class Store:
    def __init__(self):
        self.items = []

    def add(self, x):
        self.items.append(x)
        return len(self.items)

    def all(self):
        return self.items


@ray.remote
def producer(store, values):
    return ray.get([store.add.remote(v) for v in values])


@ray.remote
class Client:
    def __init__(self, store):
        self.store = store

    def push(self, v):
        return ray.get(self.store.add.remote(v))


s = Store.remote()
print(ray.get(producer.remote(s, [1, 2, 3])))
c = Client.remote(s)
print(ray.get(c.push.remote(4)))
print(ray.get(s.all.remote()))
ray.shutdown()

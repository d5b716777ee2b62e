import ray

ray.init(num_cpus=2)
total = ray.cluster_resources()["memory"]
print(total > 0)


@ray.remote(memory=100 * 1024 * 1024)
def small():
    return "fits"


@ray.remote(memory=50 * 1024 * 1024)
class Holder:
    def ping(self):
        return "held"


print(ray.get(small.remote()))
h = Holder.remote()
print(ray.get(h.ping.remote()))
print(ray.get(small.options(memory=200 * 1024 * 1024).remote()))
too_much = small.options(memory=int(total * 4)).remote()
ready, _ = ray.wait([too_much], timeout=1)
print("more memory than the cluster has waits:", len(ready))
ray.shutdown()

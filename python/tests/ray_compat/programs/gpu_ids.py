# xfail: Ray 2.60 itself times out at no_gpu() on this machine; troupe.ray runs the program to the end
import os

import ray

ray.init(num_cpus=2, num_gpus=2)


@ray.remote(num_gpus=1)
def one_gpu():
    return len(ray.get_gpu_ids()), os.environ.get("CUDA_VISIBLE_DEVICES") is not None


@ray.remote(num_gpus=1)
class GpuActor:
    def ids(self):
        return [str(i) for i in ray.get_gpu_ids()], os.environ["CUDA_VISIBLE_DEVICES"]


@ray.remote
def no_gpu():
    return ray.get_gpu_ids()


print(ray.get(one_gpu.remote()))
a, b = GpuActor.remote(), GpuActor.remote()
ia, ib = ray.get(a.ids.remote()), ray.get(b.ids.remote())
print(sorted(ia[0] + ib[0]), ia[0] == [ia[1]], ib[0] == [ib[1]])
print(ray.get(no_gpu.remote()))
print(ray.get_gpu_ids())


@ray.remote(num_gpus=0.5)
class Half:
    def ids(self):
        return ray.get_gpu_ids()


h1, h2 = Half.remote(), Half.remote()
print(ray.get(h1.ids.remote()) == ray.get(h2.ids.remote()))
ray.shutdown()

from troupe import ray

ray.init(num_cpus=4, num_gpus=2)                 # embedded; ray.init(address="auto") attaches

@ray.remote(num_gpus=0.5)
class Policy:
    def step(self, x): return x + 1

p = Policy.options(runtime_env={"env_vars": {"NCCL_DEBUG": "WARN"}}).remote()
print(ray.get(p.step.remote(ray.put(41))))      # 42
ray.shutdown()

"""verl 0.9.1's single controller (verl.single_controller.ray) driven unmodified, on Ray or on
troupe.ray: resource pools (placement groups of simulated GPUs), RayClassWithInitArgs,
RayWorkerGroup with @register dispatch modes (ONE_TO_ALL, DP_COMPUTE, DP_COMPUTE_PROTO on
DataProto, RANK_ZERO execution), the environment verl gives each worker (RANK, WORLD_SIZE,
MASTER_ADDR/MASTER_PORT), a torch.distributed gloo all-reduce among the group, colocated workers
(create_colocated_worker_cls + spawn, create_colocated_worker_cls_fused + fuse) and a detached
group reattached by its workers' names (from_detached).

Usage: python verl_worker_group.py ray|troupe. On "troupe" it calls troupe.ray.install() before
anything imports ray. Prints one line of JSON: an observation that holds no address, port, pid
or id, only facts derived from them, so that both systems must print the same line.
"""

import json
import os
import sys

if __name__ == "__main__" and sys.argv[1:] == ["troupe"]:
    import troupe.ray

    troupe.ray.install()
elif __name__ == "__main__" and sys.argv[1:] != ["ray"]:
    sys.exit("usage: verl_worker_group.py ray|troupe")

os.environ.setdefault("VERL_LOGGING_LEVEL", "ERROR")

import ray  # noqa: E402
import torch  # noqa: E402
from tensordict import TensorDict  # noqa: E402
from verl.protocol import DataProto  # noqa: E402
from verl.single_controller.base import Worker  # noqa: E402
from verl.single_controller.base.decorator import Dispatch, Execute, register  # noqa: E402
from verl.single_controller.ray import (RayClassWithInitArgs, RayResourcePool,  # noqa: E402
                                        RayWorkerGroup, create_colocated_worker_cls)
from verl.single_controller.ray.base import create_colocated_worker_cls_fused  # noqa: E402

WORLD = 2  # workers per group (one bundle each, one simulated GPU per bundle)
COLOCATE = 3  # worker groups sharing the GPU pool: each worker asks 1/3 of a GPU


class TrainWorker(Worker):
    """A worker of the shape verl's FSDP workers have: its rank comes from the environment
    verl's RayWorkerGroup sets; methods carry verl's dispatch modes."""

    def __init__(self, scale):
        super().__init__()
        self.scale = scale

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def describe(self):
        return {"rank": self.rank, "world_size": self.world_size,
                "env_rank": int(os.environ["RANK"]), "env_world": int(os.environ["WORLD_SIZE"]),
                "wg_backend": os.environ.get("WG_BACKEND"),
                "local_world": os.environ.get("RAY_LOCAL_WORLD_SIZE"),
                "master_addr": os.environ["MASTER_ADDR"], "master_port": os.environ["MASTER_PORT"],
                "node_ip": ray.util.get_node_ip_address(), "gpu_ids": ray.get_gpu_ids(),
                "pid": os.getpid()}

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def all_reduce(self, value):
        """Joins a gloo process group from MASTER_ADDR/MASTER_PORT (as verl's FSDP workers do
        with NCCL) and sums (rank + 1) * value over the group."""
        import torch.distributed as dist

        dist.init_process_group("gloo", rank=self.rank, world_size=self.world_size)
        t = torch.tensor([float((self.rank + 1) * value)])
        dist.all_reduce(t)
        gathered = [torch.zeros(1) for _ in range(self.world_size)]
        dist.all_gather(gathered, torch.tensor([float(self.rank)]))
        dist.destroy_process_group()
        return {"sum": t.item(), "gathered": [g.item() for g in gathered]}

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def square(self, x):
        return {"rank": self.rank, "out": x * x * self.scale}

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def forward(self, data: DataProto):
        x = data.batch["x"]
        out = TensorDict({"y": x * self.scale, "rank": torch.full_like(x, self.rank)},
                         batch_size=x.shape[:1])
        return DataProto(batch=out, meta_info={"seen": data.meta_info.get("tag")})

    @register(dispatch_mode=Dispatch.ALL_TO_ALL, execute_mode=Execute.RANK_ZERO)
    def leader(self, word):
        return f"{word} from rank {self.rank}"

    @register(dispatch_mode=Dispatch.ONE_TO_ALL, blocking=False)
    def later(self, x):
        return x + self.rank


class ActorRole(Worker):
    def __init__(self, lr):
        super().__init__()
        self.lr = lr

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return {"role": "actor", "rank": self.rank, "lr": self.lr, "pid": os.getpid(),
                "gpu_ids": ray.get_gpu_ids()}

    @register(dispatch_mode=Dispatch.DP_COMPUTE_PROTO)
    def update(self, data: DataProto):
        return DataProto.from_dict({"g": data.batch["x"] * self.lr})


class CriticRole(Worker):
    def __init__(self, gamma):
        super().__init__()
        self.gamma = gamma

    @register(dispatch_mode=Dispatch.ONE_TO_ALL)
    def whoami(self):
        return {"role": "critic", "rank": self.rank, "gamma": self.gamma, "pid": os.getpid(),
                "gpu_ids": ray.get_gpu_ids()}

    @register(dispatch_mode=Dispatch.DP_COMPUTE)
    def value(self, x):
        return x + self.gamma


def pids_shared(a, b):
    """Whether rank i of a and rank i of b are one process, for every i."""
    return [x["pid"] == y["pid"] for x, y in zip(a, b, strict=True)]


def main():
    obs = {}
    ray.init(num_cpus=16, num_gpus=WORLD, namespace="verl-frameworks-test",
             include_dashboard=False, log_to_driver=True)
    try:
        pool = RayResourcePool(process_on_nodes=[WORLD], use_gpu=True, max_colocate_count=COLOCATE,
                               name_prefix="trainpool")
        train_cls = RayClassWithInitArgs(cls=ray.remote(TrainWorker), scale=10)
        wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=train_cls, name_prefix="train")
        pgs = pool.get_placement_groups()
        obs["pool"] = {"pgs": len(pgs), "bundles": [pg.bundle_specs for pg in pgs]}
        info = wg.describe()
        obs["train"] = {
            "world_size": wg.world_size,
            "ranks": [i["rank"] for i in info], "env_ranks": [i["env_rank"] for i in info],
            "env_world": [i["env_world"] for i in info],
            "wg_backend": [i["wg_backend"] for i in info],
            "local_world": [i["local_world"] for i in info],
            "one_master": len({(i["master_addr"], i["master_port"]) for i in info}) == 1,
            "master_is_rank0_node": info[0]["master_addr"] == info[0]["node_ip"],
            "master_matches_group": (wg.master_address, wg.master_port) ==
                                    (info[0]["master_addr"], info[0]["master_port"]),
            "master_port_numeric": info[0]["master_port"].isdigit(),
            "gpu_ids_per_worker": [len(i["gpu_ids"]) for i in info],
            "distinct_gpus": len({tuple(i["gpu_ids"]) for i in info}) == WORLD,
            "worker_names": [n.split(":")[-1] for n in wg.worker_names],
            "names_prefixed": all(n.startswith("trainTrainWorker_") for n in wg.worker_names),
        }
        obs["all_reduce"] = wg.all_reduce(3)
        obs["dp_compute"] = wg.square([2, 5])
        data = DataProto.from_dict({"x": torch.arange(6, dtype=torch.float32)},
                                   meta_info={"tag": "batch0"})
        out = wg.forward(data)
        obs["dp_compute_proto"] = {"y": out.batch["y"].tolist(), "rank": out.batch["rank"].tolist(),
                                   "len": len(out), "meta": out.meta_info}
        # 5 rows over 2 workers: verl pads to 6 and drops the padding from the result.
        odd = wg.forward(DataProto.from_dict({"x": torch.arange(5, dtype=torch.float32)},
                                             auto_padding=True))
        obs["dp_compute_proto_padded"] = {"y": odd.batch["y"].tolist(), "len": len(odd)}
        obs["rank_zero"] = wg.leader("hello")
        refs = wg.later(100)
        obs["non_blocking"] = {"is_refs": all(isinstance(r, ray.ObjectRef) for r in refs),
                               "values": ray.get(refs)}
        obs["execute_all_sync"] = wg.execute_all_sync("square", [1, 2])

        # Colocated: two roles in one process per rank (verl's legacy WorkerDict), same pool.
        roles = {"actor": RayClassWithInitArgs(cls=ray.remote(ActorRole), lr=0.5),
                 "critic": RayClassWithInitArgs(cls=ray.remote(CriticRole), gamma=7)}
        col_wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=create_colocated_worker_cls(roles),
                                name_prefix="colo")
        spawned = col_wg.spawn(prefix_set={"actor", "critic"})
        a_info, c_info = spawned["actor"].whoami(), spawned["critic"].whoami()
        g = spawned["actor"].update(DataProto.from_dict({"x": torch.arange(4, dtype=torch.float32)}))
        obs["colocated"] = {
            "actor": [(i["role"], i["rank"], i["lr"]) for i in a_info],
            "critic": [(i["role"], i["rank"], i["gamma"]) for i in c_info],
            "one_process_per_rank": pids_shared(a_info, c_info),
            "own_process_not_train": [a["pid"] != t["pid"] for a, t in zip(a_info, info)],
            "same_gpu_as_train": [a["gpu_ids"] == t["gpu_ids"] for a, t in zip(a_info, info)],
            "update": g.batch["g"].tolist(),
            "value": spawned["critic"].value([1, 2]),
            "prefixed_on_parent": [col_wg.actor_whoami()[0]["role"], col_wg.critic_value([0, 0])],
        }

        # Fused colocated workers (verl's FusedWorker): spawn() and fuse().
        fused_cls = create_colocated_worker_cls_fused(roles)
        fused_wg = RayWorkerGroup(resource_pool=pool, ray_cls_with_init=fused_cls, name_prefix="fused")
        fused_spawn = fused_wg.spawn(prefix_set={"actor", "critic"})
        fa, fc = fused_spawn["actor"].whoami(), fused_spawn["critic"].whoami()
        fused_wg.fuse({"actor", "critic"})
        obs["fused"] = {
            "actor": [(i["role"], i["rank"]) for i in fa], "critic": [(i["role"], i["rank"]) for i in fc],
            "one_process_per_rank": pids_shared(fa, fc),
            "distinct_from_legacy": [x["pid"] != y["pid"] for x, y in zip(fa, a_info)],
            "fuse_attr_critic": fused_wg.critic.value([10, 20]),
            "fuse_attr_actor": [i["role"] for i in fused_wg.actor.whoami()],
        }
        obs["available_gpu_after_3_groups"] = round(ray.available_resources().get("GPU", 0.0), 6)

        # Detached group on a CPU-only pool, found again by its workers' names.
        cpu_pool = RayResourcePool(process_on_nodes=[WORLD], use_gpu=False, max_colocate_count=1,
                                   name_prefix="detpool", detached=True)
        det_cls = RayClassWithInitArgs(cls=ray.remote(TrainWorker), scale=3)
        det_wg = RayWorkerGroup(resource_pool=cpu_pool, ray_cls_with_init=det_cls, name_prefix="det",
                                detached=True)
        det_info = det_wg.describe()
        again = RayWorkerGroup.from_detached(worker_names=det_wg.worker_names,
                                             ray_cls_with_init=det_cls, name_prefix="det")
        again_info = again.describe()
        obs["detached"] = {
            "ranks": [i["rank"] for i in det_info], "gpu_ids": [i["gpu_ids"] for i in det_info],
            "reattached_same_processes": pids_shared(det_info, again_info),
            "reattached_square": again.square([3, 4]),
            "names_found": [ray.get_actor(n, namespace="verl-frameworks-test") is not None
                            for n in det_wg.worker_names],
        }
        for w in det_wg.workers:
            ray.kill(w)
        for pg in cpu_pool.get_placement_groups():
            ray.util.remove_placement_group(pg)
    finally:
        ray.shutdown()
    print(json.dumps(obs, sort_keys=True))


if __name__ == "__main__":
    main()

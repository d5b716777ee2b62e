"""The modules the reference (../shared/reference/worker_groups.py) imports from its own project,
written from the reference's usage for test_ray_reference.py: installed under the names it
imports (nemo_rl.*, tqdm) into a directory on sys.path, with the reference copied there
unmodified as nemo_rl/distributed/worker_groups.py so that workers import it by name."""

import os
import shutil

MODULES = {
    "tqdm/__init__.py": '''
class tqdm:
    def __init__(self, total=None, **kwargs): self.n = 0
    def update(self, n=1): self.n += n
    def __enter__(self): return self
    def __exit__(self, *exc): return False
''',
    "nemo_rl/__init__.py": "",
    "nemo_rl/distributed/__init__.py": "",
    "nemo_rl/distributed/named_sharding.py": '''
import troupe


class NamedSharding:
    """The reference's NamedSharding over troupe's: coordinates come back as {axis: index}."""

    def __init__(self, layout, names):
        self._s = troupe.NamedSharding(layout, names)
        self.names = list(names)

    def get_axis_size(self, name):
        return self._s.get_axis_size(name)

    def get_worker_coords(self, rank):
        return dict(zip(self.names, self._s.get_worker_coords(rank)))
''',
    "nemo_rl/distributed/ray_actor_environment_registry.py": '''
import sys


def get_actor_python_env(fqn):
    return sys.executable
''',
    "nemo_rl/distributed/worker_group_utils.py": '''
import copy


def recursive_merge_options(default_options, extra_options):
    out = copy.deepcopy(dict(default_options))
    for k, v in (extra_options or {}).items():
        if isinstance(v, dict) and isinstance(out.get(k), dict):
            out[k] = recursive_merge_options(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out
''',
    "nemo_rl/distributed/virtual_cluster.py": '''
import itertools

import ray
from ray.util.placement_group import (placement_group, placement_group_table,
                                      remove_placement_group)

_ports = itertools.count(1400)


class RayVirtualCluster:
    """One STRICT_PACK placement group per node entry, over ray.util.placement_group."""

    def __init__(self, bundle_ct_per_node_list, use_gpus=True, num_gpus_per_node=8,
                 max_colocated_worker_groups=1, name=""):
        self.use_gpus = use_gpus
        self.num_gpus_per_node = num_gpus_per_node
        self.max_colocated_worker_groups = max_colocated_worker_groups
        bundle = {"CPU": 1, "GPU": 1} if use_gpus else {"CPU": 1}
        self._pgs = [placement_group([dict(bundle)] * n, strategy="STRICT_PACK", name=name)
                     for n in bundle_ct_per_node_list]
        ray.get([pg.ready() for pg in self._pgs], timeout=60)

    def get_placement_groups(self):
        return self._pgs

    def _address(self, pg_idx, bundle_idx):
        node = placement_group_table(self._pgs[pg_idx])["bundles_to_node_id"][bundle_idx]
        return {n["NodeID"]: n["NodeManagerAddress"] for n in ray.nodes()}[node]

    def get_master_address_and_port(self):
        return self._address(0, 0), next(_ports)

    def get_available_addresses_and_ports_batch(self, pairs):
        return [(self._address(p, b), next(_ports)) for p, b in pairs]

    def shutdown(self):
        for pg in self._pgs:
            remove_placement_group(pg)
''',
    "nemo_rl/telemetry/__init__.py": "",
    "nemo_rl/telemetry/host_memory.py": '''
registered = {}


def register_worker_group_placement(name, placements):
    registered[name] = list(placements)


def forget_worker_group_nodes(name):
    registered.pop(name, None)
''',
    "nemo_rl/telemetry/vocabulary.py": 'WORKER_GROUP_ENV = "NRL_WORKER_GROUP"\n',
    "nemo_rl/utils/__init__.py": "",
    "nemo_rl/utils/venvs.py": '''
def add_hf_modules_cache_to_pythonpath(env):
    return env


def create_local_venv_on_each_node(py_executable, venv_name):
    raise AssertionError("no uv environments in this test")
''',
    "nemo_rl/utils/nvml.py": '''
def log_gpu_memory_diagnostics(*args, **kwargs):
    print("[GPU_DIAG] no NVML in this test", flush=True)
''',
    "refworkers.py": '''
import os

from troupe import ray  # also imported by troupe's native workers, where no `ray` is installed


class Echo:
    """The worker class of both groups (the reference's RayEcho, troupe's Echo)."""

    def __init__(self, tag="plain"):
        self.tag = tag

    @classmethod
    def configure_worker(cls, num_gpus, bundle_indices=None, num_gpus_per_node=None):
        env = {"CONFIGURED": "leader" if bundle_indices is not None else "member"}
        return None, env, {"tag": "configured"}, None

    def whoami(self):
        keys = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "NODE_RANK", "CONFIGURED", "TEST_VAR")
        return {k: os.environ.get(k) for k in keys} | {"tag": self.tag}

    def echo(self, x=None, y=None):
        return {"rank": int(os.environ["RANK"]), "x": x, "y": y}

    def cleanup(self):
        return True


RayEcho = ray.remote(Echo)
''',
}


def write(root, reference_path):
    for rel, text in MODULES.items():
        path = os.path.join(root, rel)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w") as f:
            f.write(text.lstrip())
    shutil.copyfile(reference_path, os.path.join(root, "nemo_rl/distributed/worker_groups.py"))

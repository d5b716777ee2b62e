"""RL frameworks' own worker-group code (tests/frameworks/*.py drivers) run unmodified on real
Ray and on troupe.ray (issue 30 part 3): each driver prints one JSON observation, which must be
the same on both systems and hold the values verl's semantics give. Needs .venv-peers
(scripts/peers-setup.sh); skipped without it."""

import json
import os
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VENV_PY = os.path.join(ROOT, ".venv-peers", "bin", "python")
BUILD_PY = os.path.join(ROOT, "build", "python")
DRIVERS = os.path.join(ROOT, "tests", "frameworks")

pytestmark = pytest.mark.skipif(not os.path.exists(os.path.join(ROOT, ".venv-peers",
                                                                ".troupe-peers-stamp")),
                                reason="no .venv-peers (run scripts/peers-setup.sh)")

# What verl 0.9.1 itself computes (from its dispatch/collect functions and the driver's
# workers), independent of either runtime.
VERL_EXPECTED = {
    "all_reduce": [{"gathered": [0.0, 1.0], "sum": 9.0}] * 2,
    "dp_compute": [{"out": 40, "rank": 0}, {"out": 250, "rank": 1}],
    "dp_compute_proto": {"len": 6, "meta": {"seen": "batch0"},
                         "rank": [0.0, 0.0, 0.0, 1.0, 1.0, 1.0],
                         "y": [0.0, 10.0, 20.0, 30.0, 40.0, 50.0]},
    "dp_compute_proto_padded": {"len": 5, "y": [0.0, 10.0, 20.0, 30.0, 40.0]},
    "rank_zero": "hello from rank 0",
    "non_blocking": {"is_refs": True, "values": [100, 101]},
    "available_gpu_after_3_groups": 0.0,
}


def run_driver(name, system, timeout=240):
    env = dict(os.environ, PYTHONPATH=BUILD_PY, VERL_LOGGING_LEVEL="ERROR")
    proc = subprocess.run([VENV_PY, os.path.join(DRIVERS, name), system], env=env, cwd=ROOT,
                          capture_output=True, text=True, timeout=timeout)
    if system == "ray":
        subprocess.run([os.path.join(ROOT, ".venv-peers", "bin", "ray"), "stop", "--force"],
                       capture_output=True, timeout=60)
    assert proc.returncode == 0, f"{name} on {system} failed:\n{proc.stderr[-4000:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def verl_on_ray():
    return run_driver("verl_worker_group.py", "ray")


def check_verl(obs):
    for key, want in VERL_EXPECTED.items():
        assert obs[key] == want, key
    assert obs["train"]["ranks"] == [0, 1] and obs["train"]["env_world"] == [2, 2]
    assert obs["train"]["one_master"] and obs["train"]["master_is_rank0_node"]
    assert obs["colocated"]["one_process_per_rank"] == [True, True]
    assert obs["fused"]["one_process_per_rank"] == [True, True]
    assert obs["detached"]["reattached_same_processes"] == [True, True]


def test_verl_worker_group_on_ray(verl_on_ray):
    check_verl(verl_on_ray)


def test_verl_worker_group_on_troupe_matches_ray(verl_on_ray):
    obs = run_driver("verl_worker_group.py", "troupe")
    check_verl(obs)
    assert obs == verl_on_ray

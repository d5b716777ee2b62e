"""troupe.ray on a standing cluster started with the real `troupe start` (head on 127.0.0.1, one
agent py-a on 127.0.0.9): ray.init(address="auto") finds it through the head's address file."""

import os

import pytest

from troupe import ray

import ray_workers as w
from test_standing import standing  # noqa: F401,F811 - the fixture


def test_init_auto_attaches_to_the_standing_cluster(standing, monkeypatch,  # noqa: F811
                                                    tmp_path_factory):
    address, token = standing
    # The head wrote its address to $TMPDIR/troupe-<uid>/standing/head.address, $TMPDIR being
    # the fixture's directory under pytest's base temp.
    tmpdir = os.path.dirname(os.path.dirname(os.path.dirname(
        _address_file_of(str(tmp_path_factory.getbasetemp()), address))))
    monkeypatch.setenv("TMPDIR", tmpdir)
    monkeypatch.setenv("TROUPE_TOKEN", token)
    monkeypatch.delenv("TROUPE_ADDRESS", raising=False)
    for _ in range(2):  # shutdown leaves the standing cluster running for the next driver
        ray.init(address="auto")
        try:
            nodes = ray.nodes()
            assert [n["NodeManagerAddress"] for n in nodes] == ["127.0.0.9"]
            assert ray.cluster_resources()["GPU"] == 2
            # Custom resources the agent declared (troupe start --resources tag_b=2,...).
            assert ray.cluster_resources()["tag_b"] == 2
            assert ray.cluster_resources()["disk.ssd"] == 0.5
            holder = w.Counter.options(resources={"tag_b": 2}).remote(1)
            assert ray.get(holder.where.remote(), timeout=60)[0] == "127.0.0.9"
            assert "tag_b" not in ray.available_resources()  # all of it held, as Ray shows
            ray.kill(holder)
            c = w.Counter.options(num_gpus=1).remote(1)
            ip, gpus, cuda, _ = ray.get(c.where.remote(), timeout=60)
            assert ip == "127.0.0.9" and len(gpus) == 1 and cuda == str(gpus[0])
            assert ray.get(w.square.remote(7), timeout=60) == 49
        finally:
            ray.shutdown()


def _address_file_of(base, address):
    """The head.address file holding `address`, searched under the fixture's temp dirs."""
    import glob

    for path in glob.glob(os.path.join(base, "*", "troupe-*", "standing", "head.address")):
        with open(path) as f:
            if f.read().strip() == address:
                return path
    pytest.fail(f"no head.address holding {address}")

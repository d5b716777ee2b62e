"""Cluster(metrics_port=...): the driver's Prometheus metrics over HTTP, for the token's bearer."""

import re
import urllib.error
import urllib.request

import pytest

import troupe

T = 60


def get(address, token=None):
    req = urllib.request.Request(f"http://{address}/metrics")
    if token is not None:
        req.add_header("Authorization", f"Bearer {token}")
    with urllib.request.urlopen(req, timeout=10) as r:
        return r.read().decode()


def test_driver_metrics_count_the_calls_it_made():
    with troupe.Cluster(1, num_cpus_per_host=2, metrics_port=0) as cluster:
        address = cluster.metrics_address
        assert re.fullmatch(r"127\.0\.0\.1:\d+", address), address
        with open(cluster.session_dir + "/token") as f:
            token = f.read().strip()
        w = cluster.start_worker("workers.Echo")
        w.ready().result(T)
        for v in [1, "two", [3]]:
            w.call("echo", v).result(T)
        text = get(address, token)
        # 3 calls of echo, all returned: started 3, finished 3, failed 0 (or not yet listed).
        assert re.search(r'^troupe_calls_started_total\{method="echo"[^}]*\} 3$', text, re.M), text
        assert re.search(r'^troupe_calls_finished_total\{method="echo"[^}]*\} 3$', text, re.M), text
        assert not re.search(r'^troupe_calls_failed_total\{method="echo"[^}]*\} [1-9]', text, re.M)
        with pytest.raises(urllib.error.HTTPError) as e:
            get(address)
        assert e.value.code == 401


def test_metrics_port_is_checked():
    with pytest.raises(ValueError, match="metrics_port"):
        troupe.Cluster(1, metrics_port=70000)


def test_no_metrics_by_default():
    with troupe.Cluster(1, num_cpus_per_host=2) as cluster:
        assert cluster.metrics_address is None

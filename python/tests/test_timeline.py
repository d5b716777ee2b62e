"""Cluster.timeline from Python: a Chrome trace with a track per worker and the calls' spans."""

import json
import os

import troupe

T = 60


def test_timeline_has_python_worker_calls(tmp_path):
    with troupe.Cluster(1) as cluster:
        w = cluster.start_worker("workers.Echo", name="tl-echo")
        w.ready().result(T)
        for _ in range(3):
            # 2 KiB of bytes travel without a copy and come back as a uint8 array.
            assert bytes(w.call("echo", b"x" * 2048).result(T)) == b"x" * 2048
        path = tmp_path / "trace.json"
        summary = cluster.timeline(path, timeout=10)
        assert summary["recording"] is True
        assert summary["missing"] == []
        assert summary["tracks"] == 2  # the driver and tl-echo
        trace = json.loads(path.read_text())
    labels = {e["pid"]: e["args"]["name"] for e in trace["traceEvents"]
              if e["ph"] == "M" and e["name"] == "process_name"}
    driver = [p for p, label in labels.items() if label.startswith(f"driver (pid {os.getpid()})")]
    echo = [p for p, label in labels.items() if label.startswith("tl-echo (pid ")]
    assert len(driver) == 1 and len(echo) == 1
    calls = [e for e in trace["traceEvents"]
             if e["pid"] == echo[0] and e.get("cat") == "call" and e["name"] == "echo"]
    assert len(calls) == 3
    # One positional argument of 2048 bytes (it travels as keyword __arg0).
    assert [c["args"]["args_bytes"] for c in calls] == [2048] * 3
    sends = [e for e in trace["traceEvents"] if e["pid"] == driver[0] and e.get("cat") == "send"]
    assert len(sends) == 3
    assert trace["otherData"]["clock_error_bound_us"] == summary["clock_error_us"]

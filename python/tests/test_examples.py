"""The README's Python examples (examples/python/quick_start.py, ray_quick_start.py) run as written.

It is run as a user runs it: its own interpreter, the package from this build on PYTHONPATH, the
example's directory first on sys.path (so its workers import mypkg.policy). The expected values
are worked out by hand from Policy(lr=0.5).train = sum(batch) * 0.5 + step.
"""

import os
import pathlib
import subprocess
import sys

import troupe

EXAMPLES = pathlib.Path(__file__).resolve().parents[2] / "examples" / "python"


def test_python_quick_start_prints_the_hand_computed_results():
    package_dir = str(pathlib.Path(troupe.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=package_dir)
    run = subprocess.run([sys.executable, str(EXAMPLES / "quick_start.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == [
        "losses: [2.5, 4.5]",          # dp shards [1, 2] and [3, 4], step 1
        "all: [2.0, 2.0, 2.0, 2.0]",   # four ones, step 0, on every worker
        "slice: [2.5, 2.5]",           # [1.0], step 2, on workers 2 and 3
    ], run.stderr


def test_ray_quick_start_prints_41_plus_1():
    package_dir = str(pathlib.Path(troupe.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=package_dir)
    run = subprocess.run([sys.executable, str(EXAMPLES / "ray_quick_start.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["42"], run.stderr  # Policy.step(41) = 41 + 1
    # A Python driver's agents run an interpreter with arguments: no fork server of theirs is
    # tried (it would exit and warn). The driver has exited, so its output is complete.
    assert "fork server" not in run.stderr, run.stderr


def test_python_preload_example_prints_four_results():
    package_dir = str(pathlib.Path(troupe.__file__).resolve().parents[1])
    env = dict(os.environ, PYTHONPATH=package_dir)
    run = subprocess.run([sys.executable, str(EXAMPLES / "preload.py")], env=env,
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stdout + run.stderr
    assert run.stdout.splitlines() == ["[2.5, 2.5, 2.5, 2.5]"], run.stderr  # [1, 2] * 0.5 + 1
    assert "not usable" not in run.stderr, run.stderr  # numpy is safe to preload: forked

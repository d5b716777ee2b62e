"""The differential corpus (python/tests/ray_compat/): one test per Ray program, comparing what
the program prints on troupe.ray with Ray 2.60's recorded observation (expected/NAME.json,
recorded by `harness.py --record` on real Ray), and, with TROUPE_RAY_COMPAT_LIVE=1 and the peers
venv (.venv-peers), with a live Ray run too (Ray's start makes those too slow for CI).

A program with a `# xfail: REASON` header is a strict xfail: it must differ, else the test fails
(the difference got fixed: remove the header). A run that leaves any process of its session
behind fails.
"""

import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "ray_compat"))

import harness  # noqa: E402

LIVE = os.environ.get("TROUPE_RAY_COMPAT_LIVE") == "1"


def _params(live):
    out = []
    for name in harness.names():
        reason = harness.header(name)["xfail"]
        marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
        if live and not LIVE:
            marks.append(pytest.mark.skip(reason="live Ray runs only with "
                                          "TROUPE_RAY_COMPAT_LIVE=1 (Ray's start is slow)"))
        elif live and not harness.ray_available():
            marks.append(pytest.mark.skip(reason="no Ray peer: .venv-peers missing "
                                          "(scripts/peers-setup.sh)"))
        out.append(pytest.param(name, marks=marks, id=name))
    return out


def _check(name, want):
    assert want is not None, f"no Ray recording for {name}: run harness.py --record {name}"
    got, _ = harness.run(name, "troupe")
    # Checked first and apart from the comparison: an xfail program must not hide leftovers.
    left = got["_left"]
    if left:
        pytest.fail(f"troupe.ray run of {name} left processes running: {left}", pytrace=False)
    d = harness.diff(want, got)
    if d:
        tail = "\n    ".join((got.get("_stderr") or "").splitlines()[-12:])
        raise AssertionError(f"{name}: troupe.ray differs from Ray\n{d}\n  troupe stderr "
                             f"tail:\n    {tail}")


def test_corpus_size():
    names = harness.names()
    assert len(names) >= 60, names
    missing = [n for n in names if harness.expected(n) is None]
    assert not missing, f"programs without a Ray recording: {missing}"


@pytest.mark.parametrize("name", _params(live=False))
def test_vs_recording(name):
    _check(name, harness.expected(name))


@pytest.mark.parametrize("name", _params(live=True))
def test_vs_live_ray(name):
    want, _ = harness.run(name, "ray")
    assert harness.public(want) == harness.expected(name), \
        f"{name}: live Ray differs from its recording\n{harness.diff(harness.expected(name), want)}"
    _check(name, harness.public(want))

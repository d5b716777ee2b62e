"""Ray's own microbenchmark (ray/_private/ray_perf.py main(), what `ray microbenchmark` runs)
with ray_microbenchmark_helpers.timeit's constants replaced by the side-by-side bench's quick
ones (the loop is Ray's: this wraps Ray's function, changing only its sleep and, by scaling
time.perf_counter inside it, its warm-up and round lengths). The full mode of
bench/ray_side_by_side.py runs `ray microbenchmark` itself instead.

    .venv-peers/bin/python sbs_ray_own.py --sleep S --scale F [--client]

--scale F: the warm-up lasts F s and each of the 4 rounds 2F s (Ray's: F = 1). --rounds is not
changeable here (Ray's loop has 4). Without --client, the Ray Client rows are skipped (they
need grpc, which the peers venv lacks). --sleep 10 --scale 1 is `ray microbenchmark` without
its Ray Client rows."""

import argparse
import contextlib
import io
import sys
import time
import types


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--sleep", type=float, default=10.0)
    p.add_argument("--scale", type=float, default=1.0)
    p.add_argument("--client", action="store_true")
    args = p.parse_args()

    import ray._private.ray_microbenchmark_helpers as helpers

    original = helpers.timeit
    scale = args.scale

    class _ScaledTime:
        """The `time` module as helpers.timeit sees it: sleep() takes --sleep, perf_counter()
        runs 1/scale times as fast, so its `< 1` and `< 2` mean scale and 2*scale seconds."""

        def __getattr__(self, name):
            return getattr(time, name)

        @staticmethod
        def sleep(_s):
            time.sleep(args.sleep)

        @staticmethod
        def perf_counter():
            return time.perf_counter() / scale

    def timeit(name, fn, multiplier=1, warmup_time_sec=10):
        # Ray's rate is count / (scaled seconds): scale times the real rate. Its own line is
        # held back and printed corrected, in its format (what the orchestrator parses).
        helpers.time = _ScaledTime()
        held = io.StringIO()
        try:
            with contextlib.redirect_stdout(held):
                out = original(name, fn, multiplier, warmup_time_sec)
        finally:
            helpers.time = time
        if out == [None]:
            return out
        _, mean, sd = out[0]
        mean, sd = float(mean) / scale, float(sd) / scale
        print(name, "per second", round(mean, 2), "+-", round(sd, 2), flush=True)
        return [(name, mean, sd)]

    helpers.timeit = timeit
    if not args.client:
        # ray_perf.py imports the Ray Client rows' module at its top, which imports grpc: the
        # peers venv has none (ray without its [client] extra), and `ray microbenchmark` there
        # fails with ModuleNotFoundError before its first row. A stand-in module lets its
        # other rows run; they are unchanged.
        stub = types.ModuleType("ray._private.ray_client_microbenchmark")
        stub.main = lambda results=None: results
        sys.modules[stub.__name__] = stub
    import ray._private.ray_perf as ray_perf

    ray_perf.timeit = timeit
    if args.client:
        import ray._private.ray_client_microbenchmark as client

        client.timeit = timeit
    ray_perf.main()


if __name__ == "__main__":
    main()

#!/usr/bin/python3
"""Plots the CSV of bench/control_plane_curve.cc: each figure over the number of workers, beside
the line through its first point (what linear would be), so a glance says which ones are linear.

    /usr/bin/python3 bench/plot_control_plane_curve.py control_plane_curve.csv \
        bench/control_plane_curve.png

Needs Debian's python3-matplotlib (apt-get install --no-install-recommends python3-matplotlib:
the recommended packages bring a threaded OpenBLAS, see README.md).
"""
import csv
import sys

PANELS = [
    ("start_ms", "start (s)", 1e-3),
    ("round_ms", "no-op round (ms)", 1),
    ("broadcast_ms", "4 KiB broadcast (ms)", 1),
    ("shutdown_ms", "shutdown (s)", 1e-3),
    ("detect_ms", "100 deaths reported (ms)", 1),
    ("driver_rss_mib", "driver RSS (MiB)", 1),
]


def main(argv):
    if len(argv) != 3:
        sys.exit("usage: plot_control_plane_curve.py CSV PNG")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("needs matplotlib: apt-get install --no-install-recommends python3-matplotlib")
    with open(argv[1]) as f:
        rows = list(csv.DictReader(f))
    if not rows:
        sys.exit(argv[1] + " has no rows")
    workers = [int(r["workers"]) for r in rows]
    fig, axes = plt.subplots(2, 3, figsize=(13, 7))
    for ax, (key, title, scale) in zip(axes.flat, PANELS):
        values = [float(r[key]) * scale for r in rows]
        linear = [values[0] * n / workers[0] for n in workers]
        ax.plot(workers, values, "o-", label="measured")
        if key != "detect_ms":  # one kill per host whatever the size: flat is the target
            ax.plot(workers, linear, "--", color="grey", label="linear from the first point")
        ax.set_title(title)
        ax.set_xlabel("workers (100 simulated hosts)")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("One control plane, 1,000 to 10,000 workers (bench/control_plane_curve.cc)")
    fig.tight_layout()
    fig.savefig(argv[2], dpi=80)
    print("wrote", argv[2])


if __name__ == "__main__":
    main(sys.argv)

#!/usr/bin/env python3
"""Plots one row of two or more bench/latency runs over time, one panel each, to compare builds:

    bench/latency_compare.py OUT.png ROW TARGET LABEL=RESULTS_DIR [LABEL=RESULTS_DIR ...]

RESULTS_DIR is a run's bench/results/STAMP-latency directory; TARGET-ROW.txt in it holds the
loop's iterations (seconds since the row began, latency in ms)."""
import os, sys
import matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt

out, row, target, runs = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4:]
if not runs:
    sys.exit(__doc__)
fig, axes = plt.subplots(len(runs), 1, figsize=(10, 2.2 * len(runs)), sharex=True, sharey=True)
axes = axes if len(runs) > 1 else [axes]
for ax, run in zip(axes, runs):
    label, d = run.split("=", 1)
    pts = [tuple(map(float, l.split())) for l in open(os.path.join(d, f"{target}-{row}.txt")) if l.strip()]
    lat = sorted(p[1] for p in pts)
    p99, mx = lat[int(0.99 * len(lat))], lat[-1]
    ax.plot([p[0] for p in pts], [p[1] for p in pts], ".", markersize=2)
    ax.set_title(f"{label} ({os.path.basename(d.rstrip('/'))}): p99 {p99:.2f} ms, max {mx:.1f} ms", fontsize=9)
    ax.set_ylabel("ms")
axes[-1].set_xlabel(f"seconds since the {row} row began")
fig.tight_layout()
fig.savefig(out, dpi=90)
print(out)

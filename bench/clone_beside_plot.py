"""Plot of bench/clone-beside's CSV: each row's clone times per tree size (one point per clone).

    python3 bench/clone_beside_plot.py bench/results/STAMP-clone-beside.csv   # writes .png beside it
"""
import csv
import sys

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

path = sys.argv[1]
rows = list(csv.DictReader(open(path)))
sizes = sorted({int(r["files"]) for r in rows})
names = list(dict.fromkeys(r["row"] for r in rows))
fig, axes = plt.subplots(1, len(sizes), figsize=(5 * len(sizes), 3.6), sharey=True, squeeze=False)
for ax, n in zip(axes[0], sizes):
    for i, name in enumerate(names):
        ms = [float(r["ms"]) for r in rows if int(r["files"]) == n and r["row"] == name]
        ax.scatter([i] * len(ms), ms, s=14, alpha=0.7)
    ax.set_xticks(range(len(names)))
    ax.set_xticklabels(names, rotation=20)
    ax.set_title(f"tree of {n:,} files")
    ax.set_ylabel("ms, spawn to exit")
    ax.set_yscale("log")
    ax.grid(axis="y", alpha=0.3)
fig.suptitle("scion clone through the CLI, beside a 100,000-entry directory")
fig.tight_layout()
fig.savefig(path.replace(".csv", ".png"), dpi=110)

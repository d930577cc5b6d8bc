#!/usr/bin/env python3
"""Report for bench/clone.sh: tables of the `scale` and `consec` workloads, the issue-3 targets,
and (with --plot FILE.png, if matplotlib is installed) a plot of both.

    python3 bench/clone_report.py RESULTS.csv [MORE.csv ...] [--plot out.png]

Several CSVs are merged (rows of a later file are added to those of earlier ones), so a scion run
can be shown next to a run of the peers. The CSV is peers.sh's long format:
workload,target,param,rep,metric,value.
"""
import csv
import statistics
import sys
from collections import OrderedDict, defaultdict

# issue 3: clone of the 1,000,000-file tree under 10 ms; 1,000,000-file clone within 1.5x of the
# 1,000-file one; the 1,000th consecutive clone within 1.2x of the first
TARGET_MS, TARGET_GROWTH, TARGET_CONSEC = 10.0, 1.5, 1.2


def load(paths):
    # data[workload][target][param][metric] -> [values]
    data = defaultdict(OrderedDict)
    for p in paths:
        with open(p) as fh:
            for r in csv.DictReader(fh):
                tp = data[r["workload"]].setdefault(r["target"], OrderedDict())
                pm = tp.setdefault(r["param"], defaultdict(list))
                try:
                    pm[r["metric"]].append(float(r["value"]))
                except ValueError:
                    pm[r["metric"]].append(r["value"])
    return data


def med(xs):
    xs = [x for x in xs if isinstance(x, float)]
    return statistics.median(xs) if xs else None


def pct(xs, q):  # nearest-rank percentile
    s = sorted(xs)
    if not s:
        return None
    k = max(0, min(len(s) - 1, int(-(-q * len(s) // 100)) - 1))
    return s[k]


def f(x, nd=1):
    if x is None:
        return "-"
    if isinstance(x, str):
        return x
    if abs(x) >= 1000:
        return "{:,.0f}".format(x)
    return ("{:.%df}" % nd).format(x)


def ratio(a, b):
    return a / b if (a is not None and b) else None


def table(headers, rows, out):
    w = [len(h) for h in headers]
    for r in rows:
        for i, c in enumerate(r):
            w[i] = max(w[i], len(c))
    out.append("  ".join(h.rjust(w[i]) if i else h.ljust(w[i]) for i, h in enumerate(headers)))
    out.append("  ".join("-" * x for x in w))
    for r in rows:
        out.append("  ".join(c.rjust(w[i]) if i else c.ljust(w[i]) for i, c in enumerate(r)))
    out.append("")


MODES = OrderedDict([("scale", "cold"), ("scale-warmbin", "warmbin"), ("scale-warm", "warm")])
MODE_TEXT = {
    "cold": "sync + drop_caches before every clone (peers.sh's convention; the clone tool's "
            "executable is evicted too)",
    "warmbin": "drop_caches, then the clone tool's executable and libraries read back: cold tree, warm tool",
    "warm": "no cache drop",
}


def scale_series(data, wl="scale"):
    """{target: [(size, median clone ms, median clone+sync ms, median drop ms)]} sorted by size"""
    res = OrderedDict()
    for t, params in data.get(wl, {}).items():
        pts = []
        for p, m in params.items():
            if m.get("clone_ms"):
                pts.append((int(p), med(m["clone_ms"]), med(m.get("clone_sync_ms", [])),
                            med(m.get("drop_ms", []))))
        res[t] = sorted(pts)
    return res


def consec_series(data):
    """{target: ([clone ms by clone number], [clone+sync ms], space KiB per clone or None)}"""
    res = OrderedDict()
    for t, params in data.get("consec", {}).items():
        rows = sorted((int(p), m) for p, m in params.items() if p.isdigit())
        c = [med(m["clone_ms"]) for _, m in rows]
        cs = [med(m["clone_sync_ms"]) for _, m in rows]
        sp = med(params.get("all", {}).get("space_kib_per_clone", []))
        res[t] = (c, cs, sp)
    return res


def report(data):
    out = []
    notes = data.get("note", {})
    scs = OrderedDict((m, scale_series(data, wl)) for wl, m in MODES.items() if data.get(wl))
    for mode, sc in scs.items():
        sizes = sorted({n for pts in sc.values() for n, *_ in pts})
        out.append("== scale, %s: clone latency vs tree size (4 KiB files, fan-out 30; median of reps), ms"
                   % mode)
        out.append("   (%s)" % MODE_TEXT[mode])
        hdr = (["target"] + ["%s" % f(s) for s in sizes] + ["+sync %s" % f(s) for s in sizes] +
               ["largest/smallest"])
        rows = []
        for t, pts in sc.items():
            if not pts:
                continue
            by = {n: (c, cs) for n, c, cs, _ in pts}
            row = [t] + [f(by[s][0]) if s in by else "-" for s in sizes]
            row += [f(by[s][1]) if s in by else "-" for s in sizes]
            row.append(f(ratio(pts[-1][1], pts[0][1]), 2) + " (%s/%s)" % (f(pts[-1][0]), f(pts[0][0]))
                       if len(pts) > 1 else "-")
            rows.append(row)
        table(hdr, rows, out)
        out.append("   drop (delete the clone + sync) of the largest tree, ms: " + ", ".join(
            "%s %s" % (t, f(pts[-1][3])) for t, pts in sc.items() if pts))
        out.append("")
    if scs:
        for t, params in notes.items():
            sk = params.get("scale", {}).get("skipped_size", [])
            if sk:
                out.append("   %s: not run for %s files (per-file copy, above COPY_MAX; set COPY_MAX=%d to run)"
                           % (t, " and ".join(f(x) for x in sk), max(sk)))
        tr = data.get("scale-tree", {})
        if tr:
            out.append("   time to create the trees (python, untimed for the clones), s: " + "; ".join(
                "%s %s" % (t, ", ".join("%s: %s" % (f(float(n)), f(med(m["create_ms"]) / 1000.0, 1))
                                        for n, m in ps.items())) for t, ps in tr.items()))
        out.append("")
    cn = consec_series(data)
    if cn:
        cold = any(med(data["consec"][t].get("tree", {}).get("dropcaches", [])) for t in cn)
        out.append("== consec: consecutive clones of one tree, all kept (%s; sync after each), ms"
                   % ("caches dropped before every clone" if cold else "warm caches: no cache drop"))
        hdr = ["target", "files", "clones", "#1", "#N", "median", "p90", "max", "#N/#1",
               "med last10/first10", "med(+sync)", "KiB/clone"]
        rows = []
        for t, (c, cs, sp) in cn.items():
            if not c:
                out.append("   %s: no clone succeeded" % t)
                continue
            k = min(10, len(c))
            files = med(data["consec"][t].get("tree", {}).get("files", []))
            rows.append([t, f(files, 0), str(len(c)), f(c[0]), f(c[-1]), f(med(c)), f(pct(c, 90)), f(max(c)),
                         f(ratio(c[-1], c[0]), 2), f(ratio(statistics.median(c[-k:]), statistics.median(c[:k])), 2),
                         f(med(cs)), f(sp, 0)])
        table(hdr, rows, out)
    # the targets, evaluated for every target measured (they are stated for scion)
    yn = lambda ok: "-" if ok is None else ("yes" if ok else "NO")
    if scs or cn:
        out.append("== issue 3 targets (stated for scion; peers shown for comparison)")
    if scs:
        out.append("   clone of the largest tree < %.0f ms wall; clone(largest)/clone(smallest) <= %.1f"
                   % (TARGET_MS, TARGET_GROWTH))
        hdr = ["target", "mode", "largest", "clone ms", "< 10 ms", "smallest", "clone ms", "ratio", "<= 1.5"]
        rows = []
        order = list(OrderedDict.fromkeys(t for sc in scs.values() for t in sc))
        for t, mode in [(t, m) for t in order for m in scs]:
            pts = scs[mode].get(t)
            if pts:
                big, small = pts[-1], pts[0]
                g = ratio(big[1], small[1]) if len(pts) > 1 else None
                rows.append([t, mode, f(big[0]), f(big[1]), yn(big[1] < TARGET_MS), f(small[0]), f(small[1]),
                             f(g, 2), yn(g <= TARGET_GROWTH if g is not None else None)])
        table(hdr, rows, out)
    if cn:
        out.append("   clone #N within %.1fx of clone #1 (verdict on the medians of the last and first 10; "
                   "#N/#1 compares two single samples)" % TARGET_CONSEC)
        hdr = ["target", "clones", "#N/#1", "last10/first10", "<= 1.2"]
        rows = []
        for t, (c, _, _) in cn.items():
            if len(c) < 2:
                continue
            k = min(10, len(c))
            r10 = ratio(statistics.median(c[-k:]), statistics.median(c[:k]))
            rows.append([t, str(len(c)), f(ratio(c[-1], c[0]), 2), f(r10, 2), yn(r10 <= TARGET_CONSEC)])
        table(hdr, rows, out)
    return "\n".join(out)


def plot(data, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return "no plot: python3-matplotlib is not installed (apt-get install python3-matplotlib)"
    cn = consec_series(data)
    targets = list(OrderedDict.fromkeys([t for wl in MODES for t in data.get(wl, {})] + list(cn)))
    color = {t: "C%d" % (i % 10) for i, t in enumerate(targets)}
    style = {"cold": "-", "warmbin": "--", "warm": ":"}
    has_scale = any(pts for wl in MODES for pts in scale_series(data, wl).values())
    has_consec = any(c for c, _, _ in cn.values())
    if not (has_scale or has_consec):
        return "no plot: no clone measured"
    panels = int(has_scale) + int(has_consec)
    fig, axes = plt.subplots(1, panels, figsize=(7 * panels, 5.5), squeeze=False)
    a1 = axes[0][0] if has_scale else None
    a2 = axes[0][-1] if has_consec else None
    if has_scale:
        for wl, mode in MODES.items():
            for t, pts in scale_series(data, wl).items():
                if pts:
                    a1.plot([p[0] for p in pts], [p[1] for p in pts], style[mode], marker="o", ms=4,
                            color=color[t], label="%s (%s)" % (t, mode))
        a1.axhline(TARGET_MS, color="grey", ls=":", lw=1, label="target for scion: 10 ms")
        a1.set_xscale("log"); a1.set_yscale("log")
        a1.set_xlabel("files in the tree"); a1.set_ylabel("clone wall time, ms (median of reps)")
        a1.set_title("Clone latency vs tree size (solid: cold, dashed: cold tree + warm tool, dotted: warm)",
                     fontsize=9)
        a1.grid(True, which="both", alpha=0.3); a1.legend(fontsize=6, ncol=2)
    if has_consec:
        for t, (c, _, _) in cn.items():
            if c:
                a2.plot(range(1, len(c) + 1), c, ".", ms=2, alpha=0.35, color=color[t])
                w = 25  # running median, to see the trend through the noise
                rm = [statistics.median(c[max(0, i - w // 2):i + w // 2 + 1]) for i in range(len(c))]
                a2.plot(range(1, len(c) + 1), rm, color=color[t], lw=1.5, label=t)
        a2.set_yscale("log")
        a2.set_xlabel("clone number (all earlier clones kept)"); a2.set_ylabel("clone wall time, ms")
        a2.set_title("Consecutive clones of one tree, all kept (dots: each; line: running median of 25)",
                     fontsize=9)
        a2.grid(True, which="both", alpha=0.3); a2.legend(fontsize=8)
    fig.tight_layout(); fig.savefig(path, dpi=110)
    return "plot: %s" % path


def main():
    args = sys.argv[1:]
    png = None
    if "--plot" in args:
        i = args.index("--plot")
        png = args[i + 1]
        del args[i:i + 2]
    if not args:
        sys.exit(__doc__)
    data = load(args)
    print(report(data))
    if png:
        print(plot(data, png))


if __name__ == "__main__":
    main()

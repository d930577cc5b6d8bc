#!/usr/bin/env python3
"""The small-file loop of bench/latency (issue 38): create, write 5 bytes, fsync, stat, close,
one every PERIOD ms, in DIR, until the file STOP exists (or SECONDS pass). Each iteration's
latency goes to OUT as "t_since_start_s latency_ms" lines; a summary (n, p50, p99, max) is
printed on exit.

    latency_loop.py DIR OUT [--period-ms 2] [--seconds 600] [--stop FILE]
"""
import argparse, os, sys, time

ap = argparse.ArgumentParser()
ap.add_argument("dir")
ap.add_argument("out")
ap.add_argument("--period-ms", type=float, default=2.0)
ap.add_argument("--seconds", type=float, default=600)
ap.add_argument("--stop")
a = ap.parse_args()
os.makedirs(a.dir, exist_ok=True)
lat = []
t_start = time.monotonic()
i = 0
with open(a.out, "w") as out:
    while True:
        now = time.monotonic()
        if now - t_start > a.seconds or (a.stop and os.path.exists(a.stop)):
            break
        p = os.path.join(a.dir, f"f{i % 1000}")
        t0 = time.monotonic()
        fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
        os.write(fd, b"hello")
        os.fsync(fd)
        os.fstat(fd)
        os.close(fd)
        t1 = time.monotonic()
        ms = (t1 - t0) * 1000
        lat.append(ms)
        out.write(f"{t0 - t_start:.4f} {ms:.3f}\n")
        i += 1
        rest = a.period_ms / 1000 - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
lat.sort()
def q(p):
    return lat[min(len(lat) - 1, int(p * len(lat)))] if lat else 0.0
print(f"n={len(lat)} p50={q(0.5):.2f} p99={q(0.99):.2f} max={lat[-1] if lat else 0:.2f}")

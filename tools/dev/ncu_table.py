#!/usr/bin/env python3
# ncu_table.py: per-kernel time table of the last forward in an ncu CSV
# (tests/cuda/device-session.sh ncu step: `ncu --metrics gpu__time_duration.sum --csv`).
# Forwards are split at k_embed launches; the last one (a decode step) is summed
# per (kernel, grid, block). Usage: ncu_table.py ncu.csv [forward index, default -1]
import csv, collections, re, sys
rows = list(csv.reader(open(sys.argv[1])))
hdr, data = None, []
for r in rows:
    if r and r[0] == 'ID': hdr = r; continue
    if hdr and len(r) == len(hdr): data.append(dict(zip(hdr, r)))
name = lambda d: re.sub(r'\(.*', '', d['Kernel Name']).replace('void ', '')
starts = [i for i, d in enumerate(data) if name(d).startswith('k_embed')]
k = int(sys.argv[2]) if len(sys.argv) > 2 else -1
a = starts[k]; b = starts[k + 1] if k != -1 and k + 1 < len(starts) else len(data)
agg = collections.OrderedDict()
for d in data[a:b]:
    key = f"{name(d)} grid{d['Grid Size']} block{d['Block Size']}"
    e = agg.setdefault(key, [0, 0.0]); e[0] += 1; e[1] += float(d['Metric Value'].replace(',', ''))
tot = sum(v[1] for v in agg.values())
print(f"forward {k}: {b - a} kernels, {tot / 1e3:.1f} us (each kernel alone, ncu --clock-control none)")
print(f"{'us':>9} {'%':>5} {'n':>5} {'us each':>8}  kernel")
for key, v in sorted(agg.items(), key=lambda kv: -kv[1][1]):
    print(f"{v[1] / 1e3:9.1f} {100 * v[1] / tot:5.1f} {v[0]:5d} {v[1] / v[0] / 1e3:8.2f}  {key}")

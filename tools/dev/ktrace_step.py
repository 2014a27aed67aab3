#!/usr/bin/env python3
"""ktrace_step.py: reads a kernel trace written by tools/dev/ktrace.c and shows
one decode step of the captured graph as it ran on the GPU.

    python3 tools/dev/ktrace_step.py trace.csv                 # the step summary and kernel totals
    python3 tools/dev/ktrace_step.py trace.csv --layer 20      # a layer's kernels in start order
    python3 tools/dev/ktrace_step.py trace.csv --tail          # the shared expert's down against the routed down
    python3 tools/dev/ktrace_step.py trace.csv --chain         # what each kernel adds to a layer, averaged by layer kind

A step is the run of graph kernels from one launch of the graph's first node
to the next (--step picks which, from the end: -3 by default, past the warm-up).
Times are GPU nanoseconds from CUPTI. Under programmatic dependent launch a
kernel's blocks start before its predecessor ends and wait inside it, so a
kernel's "start" is when its first block became resident, not when its work
began: read a dependent chain by the end times (each kernel's end after its
predecessor's end is what it added to the step). Names are demangled with
c++filt when it is there.
"""
import argparse
import collections
import csv
import shutil
import signal
import subprocess


def load(path):
    rows = []
    with open(path) as f:
        for r in csv.DictReader(f):
            node = int(r["graph_node"])
            if node == 0:
                continue
            rows.append({"s": int(r["start_ns"]), "e": int(r["end_ns"]), "stream": r["stream"], "node": node,
                         "blocks": r["blocks"], "threads": r["threads"], "regs": r["regs"], "name": r["name"]})
    rows.sort(key=lambda r: r["s"])
    return rows


def demangler(names):
    names = sorted(set(names))
    if not shutil.which("c++filt"):
        return lambda n: n
    out = subprocess.run(["c++filt"], input="\n".join(names), capture_output=True, text=True).stdout.split("\n")
    table = dict(zip(names, out))
    return lambda n: table.get(n, n).split("(")[0].replace("void ", "")


def steps(rows):
    first = rows[0]["node"]
    starts = [i for i, r in enumerate(rows) if r["node"] == first]
    return [rows[a:b] for a, b in zip(starts, starts[1:] + [len(rows)])]


def summary(step, short):
    t0 = min(r["s"] for r in step)
    t1 = max(r["e"] for r in step)
    spans = sorted((r["s"], r["e"]) for r in step)
    busy, (cs, ce) = 0, spans[0]
    for s, e in spans[1:]:
        if s > ce:
            busy += ce - cs
            cs, ce = s, e
        else:
            ce = max(ce, e)
    busy += ce - cs
    print(f"{len(step)} kernels, {(t1 - t0) / 1e3:.0f} us from the first start to the last end "
          f"({1e9 / (t1 - t0):.1f} steps a second), some kernel resident {busy / 1e3:.0f} us")
    agg = collections.defaultdict(lambda: [0, 0])
    for r in step:
        a = agg[short(r["name"])]
        a[0] += 1
        a[1] += r["e"] - r["s"]
    print("kernel (resident time: includes the wait under PDL)          count   total us   each us")
    for k, (c, d) in sorted(agg.items(), key=lambda x: -x[1][1]):
        print(f"  {k[:58]:58s} {c:5d} {d / 1e3:10.0f} {d / c / 1e3:9.2f}")


def layer(step, short, n):
    hc = [i for i, r in enumerate(step) if "hc_pre" in short(r["name"])]
    if 2 * n + 2 >= len(hc):
        raise SystemExit(f"no layer {n}: {len(hc) // 2} layers in the step")
    a, b = hc[2 * n], hc[2 * n + 2]
    t0 = step[a]["s"]
    print("  start     end   end-after-prev-end  kernel  (us from the layer's first HC pre)")
    prev_end = None
    for r in step[a:b + 1]:
        s, e = (r["s"] - t0) / 1e3, (r["e"] - t0) / 1e3
        gain = "" if prev_end is None else f"{e - prev_end:+7.1f}"
        prev_end = e if prev_end is None else max(prev_end, e)
        print(f"  {s:6.1f}  {e:6.1f}  {gain:>8s}  {short(r['name'])[:44]:44s} {r['blocks']}x{r['threads']} "
              f"r{r['regs']}")


def tail(step, short):
    routed = [r for r in step if "q2k_down" in short(r["name"]) or "moes_down" in short(r["name"])]
    if not routed:
        raise SystemExit("no routed down kernels in the step")
    total = 0
    for d in routed:
        # the shared down: the first kernel to end after this routed down starts that is not on its path
        later = [r for r in step if r["s"] >= d["s"] - 20000 and r["e"] > d["e"] and "k_g3_q8" in short(r["name"])]
        later = [r for r in later if r["s"] < d["e"]]
        if later:
            total += min(r["e"] for r in later) - d["e"]
    print(f"{len(routed)} layers: the shared down ended after the routed down by {total / 1e3:.0f} us in all "
          f"({total / len(routed) / 1e3:.1f} a layer)")


def chain(steps_, short):
    """Per layer kind (CSA: an indexer top-k; HCA: compressor kernels without
    one; window only), the mean of what each kernel's end added to the layer's
    latest end so far (positive parts only), over the layers of the steps."""
    kinds = collections.defaultdict(lambda: collections.defaultdict(float))
    nlay = collections.Counter()
    for step in steps_:
        hc = [i for i, r in enumerate(step) if "hc_pre" in short(r["name"])]
        for n in range(0, len(hc) - 2, 2):
            seg = step[hc[n]:hc[n + 2]]
            names = [short(r["name"]) for r in seg]
            kind = "CSA" if any("idx_topk" in x for x in names) else "HCA" if any("comp_" in x for x in names) else "window"
            nlay[kind] += 1
            prev = None
            for r, nm in zip(seg, names):
                if prev is not None and r["e"] > prev:
                    kinds[kind][nm] += (r["e"] - prev) / 1e3
                prev = r["e"] if prev is None else max(prev, r["e"])
    for kind in ("CSA", "HCA", "window"):
        if not nlay[kind]:
            continue
        tot = sum(kinds[kind].values()) / nlay[kind]
        print(f"{kind}: {nlay[kind]} layers, {tot:.1f} us a layer from HC step to HC step; what each kernel adds (us a layer):")
        for nm, v in sorted(kinds[kind].items(), key=lambda x: -x[1]):
            if v / nlay[kind] >= 0.05:
                print(f"  {nm[:58]:58s} {v / nlay[kind]:7.2f}")


def main():
    signal.signal(signal.SIGPIPE, signal.SIG_DFL)     # quiet under | head
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("--step", type=int, default=-3)
    ap.add_argument("--layer", type=int)
    ap.add_argument("--tail", action="store_true")
    ap.add_argument("--chain", action="store_true", help="mean adds per layer kind over the last --nsteps steps")
    ap.add_argument("--nsteps", type=int, default=4)
    a = ap.parse_args()
    rows = load(a.trace)
    if not rows:
        raise SystemExit("no graph kernels in the trace")
    st = steps(rows)
    step = st[a.step]
    short = demangler(r["name"] for r in step)
    if a.chain:
        chain(st[-a.nsteps - 2:-2] if len(st) > a.nsteps + 2 else st, short)
    elif a.layer is not None:
        layer(step, short, a.layer)
    elif a.tail:
        tail(step, short)
    else:
        summary(step, short)


if __name__ == "__main__":
    main()

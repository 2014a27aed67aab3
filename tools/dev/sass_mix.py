#!/usr/bin/env python3
"""sass_mix.py: one kernel's ncu source page (SASS, CSV) summarised.

Why: the decode kernels are tuned by their instruction counts and where
their warps wait; ncu's page lists that per SASS line, which is too long to
read. This prints, from `ncu -i R.ncu-rep --page source --csv --print-source
sass` (tests/cuda/device-session.sh's `ncuk` step):
  - the total warp instructions and, per opcode, the count, its share, the
    thread instructions a unit of work (--per N: e.g. the weights a launch
    reads) and the warp-stall samples on it;
  - the lines grouped by how often each ran (a loop body runs its count per
    iteration: the largest groups are the loops), with their stall samples;
  - the stall reasons, over all lines and over the hottest group;
  - with --body, that group's lines in address order.
Usage: sass_mix.py SASS.csv [--per N] [--body] [--top K]
"""
import csv
import collections
import sys


def opcode(src):
    toks = src.split()
    if not toks:
        return ''
    op = toks[1] if toks[0].startswith('@') and len(toks) > 1 else toks[0]
    return op.split('.')[0]


def main(argv):
    if len(argv) < 2:
        print(__doc__.strip())
        return 2
    per = None
    body = '--body' in argv
    top = 25
    if '--per' in argv:
        per = float(argv[argv.index('--per') + 1])
    if '--top' in argv:
        top = int(argv[argv.index('--top') + 1])
    rows = list(csv.reader(open(argv[1], newline='')))
    hi = next(i for i, r in enumerate(rows) if 'Instructions Executed' in r)
    hdr, data = rows[hi], [r for r in rows[hi + 1:] if len(r) == len(rows[hi])]
    ie, isrc = hdr.index('Instructions Executed'), hdr.index('Source')
    iw = hdr.index('Warp Stall Sampling (All Samples)')
    stall_cols = [c for c in hdr if c.startswith('stall_') and 'Not Issued' not in c]

    def num(r, i):
        try:
            return int(float(r[i] or 0))
        except ValueError:
            return 0

    total = sum(num(r, ie) for r in data)
    samples = sum(num(r, iw) for r in data)
    print(f'{total} warp instructions, {samples} stall samples, {len(data)} SASS lines')
    ops, ost = collections.Counter(), collections.Counter()
    for r in data:
        ops[opcode(r[isrc])] += num(r, ie)
        ost[opcode(r[isrc])] += num(r, iw)
    print(f'{"opcode":12s} {"warp instr":>11s} {"share":>6s} {"/unit" if per else "":>7s} {"stalls":>7s}')
    for op, v in ops.most_common(top):
        u = f'{v * 32 / per:7.3f}' if per else ''
        print(f'{op:12s} {v:11d} {100 * v / max(total, 1):5.1f}% {u:>7s} {ost[op]:7d}')
    groups = collections.defaultdict(list)
    for r in data:
        groups[num(r, ie)].append(r)
    print('\nlines by execution count (count: lines, instructions, stall samples)')
    ranked = sorted(groups.items(), key=lambda kv: -kv[0] * len(kv[1]))
    for cnt, rs in ranked[:8]:
        print(f'  {cnt:8d}: {len(rs):5d} lines {cnt * len(rs):11d} instr {sum(num(r, iw) for r in rs):7d} stalls')
    if stall_cols:
        def reasons(rs):
            c = collections.Counter()
            for r in rs:
                for s in stall_cols:
                    c[s[6:]] += num(r, hdr.index(s))
            return ', '.join(f'{k} {v}' for k, v in c.most_common(8) if v)
        print('\nstall reasons, all lines:', reasons(data))
        if ranked:
            print(f'stall reasons, the {ranked[0][0]}-count lines:', reasons(ranked[0][1]))
    if body and ranked:
        print(f'\nthe {ranked[0][0]}-count lines (stall samples, source):')
        for r in ranked[0][1]:
            print(f'{num(r, iw):5d}  {r[isrc].strip()}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))

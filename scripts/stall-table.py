#!/usr/bin/env python3
"""stall-table.py -- summarizes a source_<k>.csv from scripts/profile-stalls.sh:
the share of warp-stall samples in the mainloop (between the first and last
HGMMA/WARPGROUP instruction), before it and after it (the epilogue), and the
instructions with the most samples, each with its neighbourhood.
  python3 scripts/stall-table.py DIR/source_gemm_x1.csv [top]"""
import csv
import sys

path = sys.argv[1]
top = int(sys.argv[2]) if len(sys.argv) > 2 else 20
with open(path, newline="") as fh:
    rows = list(csv.reader(fh))
hdr_i = next(i for i, r in enumerate(rows) if r and r[0] == "Address")
hdr = rows[hdr_i]
col = {name: i for i, name in enumerate(hdr)}
body = [r for r in rows[hdr_i + 1:] if len(r) == len(hdr) or len(r) == len(hdr) + 1]
src = [r[col["Source"]].strip() for r in body]
smp = [int(r[col["Warp Stall Sampling (All Samples)"]] or 0) for r in body]
exe = [int(r[col["Instructions Executed"]] or 0) for r in body]
total = sum(smp) or 1
mma = [i for i, s in enumerate(src) if "HGMMA" in s]
lo, hi = (mma[0], mma[-1]) if mma else (0, -1)
# The mainloop is the span of the HGMMAs plus its loop tail up to the next
# backward branch after the last HGMMA.
end = hi
for i in range(hi, min(hi + 200, len(src))):
    if src[i].startswith("@") and "BRA" in src[i] or src[i].startswith("BRA"):
        end = i
        break
parts = {"before mainloop": sum(smp[:lo]), "mainloop": sum(smp[lo:end + 1]), "after (epilogue)": sum(smp[end + 1:])}
print(f"{path}: {total} stall samples, {len(src)} SASS instructions")
for k, v in parts.items():
    print(f"  {k:18s} {v:8d}  {100.0 * v / total:5.1f}%")
order = sorted(range(len(src)), key=lambda i: -smp[i])[:top]
print(f"  top {top} instructions (index, samples, %, executed, SASS):")
for i in order:
    where = "main" if lo <= i <= end else ("pre" if i < lo else "epi")
    print(f"  {i:6d} {where:4s} {smp[i]:7d} {100.0 * smp[i] / total:5.1f}% {exe[i]:9d}  {src[i][:90]}")

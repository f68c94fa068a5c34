#!/usr/bin/env python3
"""Summarize `nvcc -Xptxas -v` output of harness.cu: one line per kernel with
tile config, layouts, element type, epilogue, registers, stack and spills.
Usage: ptxas_summary.py ptxas.txt
Exit status 1 on any spill, except in kernels whose pretty name matches the
regex in the environment variable SPILL_OK (known, accepted epilogue spills;
they are still listed)."""
import os
import re
import sys

rows = []
cur = None
for line in open(sys.argv[1]):
    m = re.search(r"Compiling entry function '([^']+)' for '([^']+)'", line)
    if m:
        cur = {"name": m.group(1), "arch": m.group(2)}
        rows.append(cur)
        continue
    if cur is None:
        continue
    m = re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill loads", line)
    if m:
        cur["stack"], cur["st"], cur["ld"] = map(int, m.groups())
    m = re.search(r"Used (\d+) registers", line)
    if m:
        cur["regs"] = int(m.group(1))


def pretty(name):
    m = re.search(r"Sm90ConfigILi(\d+)ELi(\d+)ELi(\d+)ELb(\d)ELi(\d+)E", name)
    if m:
        bm, bn, st, pp, grp = m.groups()
        la = "A_MxK" if "A_MxK" in name else "A_KxM"
        lb = "B_NxK" if "B_NxK" in name else "B_KxN"
        el = "f16" if "6__half" in name else "bf16"
        epi = re.search(r"(Epi_\w+?)(E|I)", name.split(lb)[-1])
        return (f"sm90 {bm}x{bn} {'pp' if pp == '1' else 'coop'} {st}st g{grp} {la}*{lb} {el} "
                f"{epi.group(1) if epi else '?'}")
    m = re.search(r"GemmConfigILi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELi(\d+)ELb(\d)", name)
    if not m:
        return name
    bm, bn, bk, wm, wn, st, mb, db = m.groups()
    la = "A_MxK" if "A_MxK" in name else "A_KxM"
    lb = "B_NxK" if "B_NxK" in name else "B_KxN"
    el = "f16" if "6__half" in name else "bf16"
    epi = re.search(r"(Epi_\w+?)(E|I)", name.split(lb)[-1])
    return (f"{bm}x{bn}x{bk} {wm}x{wn}w {st}st mb{mb} {'db' if db == '1' else 'sb'} {la}*{lb} {el} "
            f"{epi.group(1) if epi else '?'}")


ok_re = os.environ.get("SPILL_OK")
bad = accepted = 0
for r in sorted(rows, key=lambda r: pretty(r["name"])):
    spill = r.get("st", 0) + r.get("ld", 0)
    ok = spill > 0 and ok_re is not None and re.search(ok_re, pretty(r["name"])) is not None
    bad += spill > 0 and not ok
    accepted += ok
    mark = ("  <-- SPILL (accepted)" if ok else "  <-- SPILL") if spill else ""
    print(f"{r['arch']:7} {pretty(r['name']):58} regs={r.get('regs', '?'):>3} stack={r.get('stack', 0):>3} "
          f"spill_st={r.get('st', 0)} spill_ld={r.get('ld', 0)}{mark}")
print(f"{len(rows)} kernels, {bad} with spills" + (f" (+{accepted} accepted: SPILL_OK={ok_re})" if accepted else ""))
sys.exit(1 if bad else 0)

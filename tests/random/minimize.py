#!/usr/bin/env python3
"""Greedy minimiser for a failing differential program.

usage: minimize.py path/to/weft_differential SEED [KIND] [CONFIG]

Reruns Differential.Single with reductions (WEFT_DIFF_DROP, _DROP_ACC, _DROP_WAIT, _PLAIN, _NOPRIO; see
differential.cpp) and keeps each one under which the program still fails (a mismatch or a hang, detected
after a few seconds), then prints the reduced program and the environment that reproduces it.
"""
import os
import re
import subprocess
import sys

exe, seed = sys.argv[1], sys.argv[2]
kind = sys.argv[3] if len(sys.argv) > 3 else "all"
config = sys.argv[4] if len(sys.argv) > 4 else None
HANG = os.environ.get("MIN_HANG_SECONDS", "3")
TRIES = int(os.environ.get("MIN_TRIES", "3"))  # a reduction must fail in one of this many runs


def run(red):
    env = dict(os.environ, WEFT_DIFF_SEED=seed, WEFT_DIFF_KIND=kind, WEFT_DIFF_HANG_SECONDS=HANG)
    if config is not None:
        env["WEFT_DIFF_CONFIG"] = config
    for k, v in red.items():
        if v:
            env[k] = v
    r = subprocess.run([exe, "--gtest_filter=Differential.Single"], env=env, capture_output=True, text=True,
                       timeout=int(HANG) * 4 + 30)
    return r.returncode != 0, r.stdout + r.stderr


current_text = None


def fails(red):
    """True if the program reduced by `red` differs from the current one and still fails."""
    for i in range(TRIES):
        bad, out = run(red)
        if i == 0 and current_text is not None and program_text(out) == current_text:
            return False, out  # the reduction changed nothing (already applied, or not applicable)
        if bad:
            print("  still fails:", " ".join(f"{k}={v}" for k, v in red.items() if v), file=sys.stderr, flush=True)
            return True, out
    return False, out


def program_text(out):
    return [l for l in out.splitlines() if re.match(r"\s*T\d+", l)]


red = {"WEFT_DIFF_DROP": "", "WEFT_DIFF_DROP_ACC": "", "WEFT_DIFF_DROP_WAIT": "", "WEFT_DIFF_PLAIN": "",
       "WEFT_DIFF_NOPRIO": ""}
bad, out = fails(red)
if not bad:
    sys.exit("the program does not fail")


def add(key, item):
    r = dict(red)
    r[key] = (r[key] + "," if r[key] else "") + item
    return r


current_text = program_text(out)
for key in ("WEFT_DIFF_PLAIN", "WEFT_DIFF_NOPRIO"):
    r = dict(red, **{key: "1"})
    bad, out = fails(r)
    if bad:
        red, current_text = r, program_text(out)
changed = True
while changed:
    changed = False
    bad, out = run(red)
    lines = program_text(out)
    tasks = [int(re.match(r"\s*T(\d+)", l).group(1)) for l in lines]
    for t in reversed(tasks[1:]):  # drop subtrees, leaves first
        r = add("WEFT_DIFF_DROP", str(t))
        bad, out2 = fails(r)
        if bad:
            red, changed, current_text = r, True, program_text(out2)
    bad, out = run(red)
    for l in program_text(out):
        t = int(re.match(r"\s*T(\d+)", l).group(1))
        accs = re.findall(r"\(v(\d+)\)", l.split("|")[0])
        for v in accs:
            r = add("WEFT_DIFF_DROP_ACC", f"{t}:{v}")
            bad, out2 = fails(r)
            if bad:
                red, changed, current_text = r, True, program_text(out2)
        nwaits = len(re.findall(r"taskwait", l.split("|")[1]))
        for k in reversed(range(nwaits)):
            r = add("WEFT_DIFF_DROP_WAIT", f"{t}:{k}")
            bad, out2 = fails(r)
            if bad:
                red, changed, current_text = r, True, program_text(out2)

bad, out = run(red)
print("\n".join(l for l in out.splitlines() if not l.startswith("[")))
print("reproduce:", " ".join(f"{k}={v}" for k, v in red.items() if v),
      f"WEFT_DIFF_SEED={seed} WEFT_DIFF_KIND={kind}" + (f" WEFT_DIFF_CONFIG={config}" if config else ""),
      exe, "--gtest_filter=Differential.Single")

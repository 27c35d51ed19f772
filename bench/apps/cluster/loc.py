#!/usr/bin/env python3
"""Lines of code per version of the dense applications (bench/apps/cluster), as a table app x version.

    python3 bench/apps/cluster/loc.py [--dir DIR] [--markdown]

A version of an application is the source file <app>_<version>.cpp (matvec_mpi_weft.cpp: matvec, mpi-weft);
every such file found is counted, so a version added later appears without changes here. The column `shared`
counts <app>.hpp: the state, the kernels and the checks that every version of the application uses.

Counted: lines with code once comments (// and /* */, outside string and character literals) and blank lines
are removed, and without the lines every file has whatever its content (#include, `namespace dense {` and its
closing brace): what remains is the version's own code, MPI and pragmas included.
"""
import argparse
import os
import re
import sys

APPS = ["matvec", "matmul", "jacobi", "cholesky"]
BOILERPLATE = re.compile(r"^(#include\b.*|#pragma once|namespace \w+ \{|\}\s*)$")


def strip_comments(text):
    """The text without its comments; string and character literals are kept whole."""
    out = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
        elif text.startswith("/*", i):
            end = text.find("*/", i + 2)
            end = n if end < 0 else end + 2
            out.append("\n" * text.count("\n", i, end))  # keep the line structure
            i = end
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(text[i:j + 1])
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def count(path):
    with open(path, encoding="utf-8") as f:
        lines = strip_comments(f.read()).splitlines()
    code = [line.strip() for line in lines if line.strip()]
    # A closing brace alone closes the namespace only on the last code line; elsewhere it is code.
    kept = [line for k, line in enumerate(code)
            if not (BOILERPLATE.match(line) and (line != "}" or k == len(code) - 1))]
    return len(kept)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--dir", default=os.path.dirname(os.path.abspath(__file__)),
                    help="the folder of the sources (default: this script's)")
    ap.add_argument("--markdown", action="store_true", help="print a Markdown table")
    args = ap.parse_args()
    table, versions = {}, []
    for name in sorted(os.listdir(args.dir)):
        m = re.fullmatch(r"([a-z]+)_(\w+)\.cpp", name)
        if not m or m.group(1) not in APPS:
            continue
        version = m.group(2).replace("_", "-")
        table.setdefault(m.group(1), {})[version] = count(os.path.join(args.dir, name))
        if version not in versions:
            versions.append(version)
    if not table:
        sys.exit(f"loc.py: no <app>_<version>.cpp files in {args.dir}")
    # serial first, then mpi-*, then the rest (weft-offload-*) in name order
    versions.sort(key=lambda v: (v != "serial", not v.startswith("mpi"), v))
    columns = versions + ["shared"]
    for app in table:
        header = os.path.join(args.dir, app + ".hpp")
        if os.path.exists(header):
            table[app]["shared"] = count(header)
    rows = [[app] + [str(table[app].get(v, "-")) for v in columns] for app in APPS if app in table]
    head = ["app"] + columns
    if args.markdown:
        print("| " + " | ".join(head) + " |")
        print("|" + "|".join(["---"] + ["---:"] * len(columns)) + "|")
        for r in rows:
            print("| " + " | ".join(r) + " |")
    else:
        widths = [max(len(x) for x in col) for col in zip(head, *rows)]
        for r in [head] + rows:
            print("  ".join(x.ljust(w) if k == 0 else x.rjust(w) for k, (x, w) in enumerate(zip(r, widths))))


if __name__ == "__main__":
    main()

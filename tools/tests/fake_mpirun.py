#!/usr/bin/env python3
"""A stand-in for mpirun in tools/metg's tests: `fake_mpirun.py -np N --oversubscribe PROGRAM ARGS...` runs
PROGRAM once with FAKE_MPI_RANKS=N (the fake MPI system reads its rank count from it)."""

import os
import sys


def main():
    args = sys.argv[1:]
    if len(args) < 4 or args[0] != "-np" or args[2] != "--oversubscribe":
        print(f"fake_mpirun: expected '-np N --oversubscribe PROGRAM ...', got {args}", file=sys.stderr)
        sys.exit(2)
    os.environ["FAKE_MPI_RANKS"] = args[1]
    os.execv(args[3], args[3:])


if __name__ == "__main__":
    main()

#!/usr/bin/env python3
"""A stand-in for mpirun in tools/metg's tests: `fake_mpirun.py -np N --oversubscribe [--bind-to none] PROGRAM
ARGS...` runs PROGRAM once with FAKE_MPI_RANKS=N (the fake systems read their rank count from it) and, with
--bind-to none, FAKE_MPI_UNBOUND=1."""

import os
import sys


def main():
    args = sys.argv[1:]
    if len(args) < 4 or args[0] != "-np" or args[2] != "--oversubscribe":
        print(f"fake_mpirun: expected '-np N --oversubscribe [--bind-to none] PROGRAM ...', got {args}",
              file=sys.stderr)
        sys.exit(2)
    os.environ["FAKE_MPI_RANKS"] = args[1]
    program = args[3:]
    if program[:2] == ["--bind-to", "none"]:
        os.environ["FAKE_MPI_UNBOUND"] = "1"
        program = program[2:]
    if not program:
        print("fake_mpirun: no program", file=sys.stderr)
        sys.exit(2)
    os.execv(program[0], program)


if __name__ == "__main__":
    main()

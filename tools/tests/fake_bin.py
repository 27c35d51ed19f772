"""A test case with a folder of fake Task Bench programs (fake_taskbench.py) for tools/metg to run."""

import os
import shlex
import sys
import tempfile
import unittest

FAKE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "fake_taskbench.py")


class FakeTaskbenchCase(unittest.TestCase):
    """cls.bin holds taskbench-<system> for each of cls.SYSTEMS: wrappers rather than links to the fake, which
    start it with this interpreter and without site packages (that keeps the hundreds of runs of a test fast)."""

    SYSTEMS = ()

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        cls.bin = os.path.join(cls.tmp.name, "bin")
        os.mkdir(cls.bin)
        for s in cls.SYSTEMS:
            path = os.path.join(cls.bin, "taskbench-" + s)
            with open(path, "w") as f:
                f.write(f'#!/bin/sh\nFAKE_TASKBENCH_SYSTEM={s} exec {shlex.quote(sys.executable)} -S '
                        f'{shlex.quote(FAKE)} "$@"\n')
            os.chmod(path, 0o755)

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

"""Runs one benchmark command with a time limit, capturing its output."""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import time


@dataclasses.dataclass
class Completed:
    argv: list[str]
    returncode: int | None  # None when it timed out or could not start
    stdout: str
    stderr: str
    wall: float  # seconds, as seen from here
    timed_out: bool = False
    start_error: str | None = None  # why it could not be started

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.timed_out and self.start_error is None

    def describe_failure(self, timeout: float) -> str:
        if self.start_error is not None:
            return f"could not start: {self.start_error}"
        if self.timed_out:
            return f"timed out after {timeout:g} s (killed)"
        if self.returncode is not None and self.returncode < 0:
            try:
                name = signal.Signals(-self.returncode).name
            except ValueError:
                name = f"signal {-self.returncode}"
            return f"killed by {name}"
        return f"exit status {self.returncode}"


def tail(text: str, lines: int = 12) -> str:
    kept = text.rstrip("\n").splitlines()[-lines:]
    return "\n".join(kept)


def run(argv: list[str], extra_env: dict[str, str] | None = None, timeout: float = 300.0) -> Completed:
    """Runs argv to completion or until `timeout` seconds have passed.

    The command runs in its own process group so that a timeout also ends what it started (mpirun's ranks).
    """
    env = dict(os.environ)
    if extra_env:
        env.update(extra_env)
    start = time.monotonic()
    try:
        proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL,
                                env=env, text=True, errors="replace", start_new_session=True)
    except OSError as e:
        return Completed(argv, None, "", "", 0.0, start_error=str(e))
    try:
        out, err = proc.communicate(timeout=timeout)
        return Completed(argv, proc.returncode, out, err, time.monotonic() - start)
    except subprocess.TimeoutExpired:
        _kill_group(proc)
        out, err = proc.communicate()
        return Completed(argv, None, out, err, time.monotonic() - start, timed_out=True)
    except BaseException:
        # Ctrl-C or an error here: do not leave the benchmark running behind us.
        _kill_group(proc)
        proc.communicate()
        raise


def _kill_group(proc: subprocess.Popen) -> None:
    for sig, grace in ((signal.SIGTERM, 2.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            return
        if grace is None:
            return
        try:
            proc.wait(timeout=grace)
            return
        except subprocess.TimeoutExpired:
            continue

"""A plain-text progress bar for stderr.

On a terminal it redraws one line in place; otherwise (CI logs, pipes) it prints a new line only every
`every` percent or `interval` seconds, so logs stay short and readable.
"""

from __future__ import annotations

import sys
import time


def _clock(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}:{seconds % 60:02d}"


class Progress:
    def __init__(self, total: int, stream=None, width: int = 30, every: float = 10.0, interval: float = 30.0,
                 tty: bool | None = None, clock=time.monotonic):
        self.total = max(total, 0)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        self.width = width
        self.every = every
        self.interval = interval
        self.tty = self.stream.isatty() if tty is None else tty
        self.clock = clock
        self.start = clock()
        self._last_pct = -every  # so that the first run done prints a line at once
        self._last_time = self.start
        self._line_open = False

    def line(self, label: str = "") -> str:
        frac = self.done / self.total if self.total else 1.0
        filled = int(frac * self.width)
        bar = "#" * filled + "." * (self.width - filled)
        elapsed = self.clock() - self.start
        eta = f" eta {_clock(elapsed / frac - elapsed)}" if 0 < frac < 1 else ""
        text = f"[{bar}] {self.done}/{self.total} {frac * 100:3.0f}% {_clock(elapsed)}{eta}"
        return f"{text}  {label}" if label else text

    def advance(self, label: str = "", steps: int = 1) -> None:
        self.done = min(self.done + steps, self.total)
        self._draw(label)

    def _draw(self, label: str) -> None:
        now = self.clock()
        pct = 100.0 * self.done / self.total if self.total else 100.0
        if self.tty:
            self.stream.write("\r\033[K" + self.line(label))
            self._line_open = True
        elif (pct - self._last_pct >= self.every or now - self._last_time >= self.interval
              or self.done == self.total):
            self.stream.write(self.line(label) + "\n")
            self._last_pct, self._last_time = pct, now
        self.stream.flush()

    def message(self, text: str) -> None:
        """Prints text on its own lines without breaking the bar."""
        if self._line_open:
            self.stream.write("\r\033[K")
        self.stream.write(text.rstrip("\n") + "\n")
        if self._line_open:
            self.stream.write(self.line())
        self.stream.flush()

    def finish(self) -> None:
        if self._line_open:
            self.stream.write("\n")
            self._line_open = False
        self.stream.flush()

"""Progress of a long dump, load or migration: a bar on a terminal, log lines otherwise.

On a terminal (stderr a TTY) a tqdm bar shows records, records/s and, when the total is
known, the ETA. Otherwise (a CI job, a pod's log) one plain line every `every_s` seconds and
one at the end says the same: ``migrate inbox: 120000/400000 records, 9800/s, ETA 29 s``.
"""

from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, TextIO

from tqdm import tqdm

__all__ = ["Progress"]


class Progress:
    """Counts records of one phase (`label`) out of `total` (None: unknown)."""

    def __init__(
        self, label: str, total: int | None, *, out: TextIO | None = None, every_s: float = 5.0
    ) -> None:
        self.label = label
        self.total = total
        self.done = 0
        self._out = out or sys.stderr
        self._every_s = every_s
        self._started = time.monotonic()
        self._said = self._started
        self._bar: tqdm[Any] | None = None
        if self._out.isatty():
            self._bar = tqdm(
                total=total, desc=label, unit=" records", unit_scale=True, file=self._out
            )

    def add(self, n: int) -> None:
        """`n` more records done."""
        self.done += n
        if self._bar is not None:
            self._bar.update(n)
            return
        now = time.monotonic()
        if now - self._said >= self._every_s:
            self._said = now
            self._line()

    def rate(self) -> float:
        """Records per second so far."""
        return self.done / max(time.monotonic() - self._started, 1e-9)

    def _line(self, end: bool = False) -> None:
        rate = self.rate()
        of = f"/{self.total}" if self.total is not None else ""
        text = f"{self.label}: {self.done}{of} records, {rate:.0f}/s"
        if end:
            text += f", done in {time.monotonic() - self._started:.1f} s"
        elif self.total is not None and rate > 0:
            text += f", ETA {max(self.total - self.done, 0) / rate:.0f} s"
        print(text, file=self._out, flush=True)

    def __enter__(self) -> Progress:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._bar is not None:
            self._bar.close()
        elif kind is None:
            self._line(end=True)

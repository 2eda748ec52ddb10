"""A progress display for long work (building many artifacts, the jit's first build).

On a terminal one status line is rewritten in place (``\\r`` and erase-to-end-of-line); anywhere
else (a log file, CI, a pipe) each finished step is one plain line, so logs stay readable.
Only the standard library is used.

    with Progress(len(builds), "build") as p:
        for name, fn in builds:
            with p.step(name):
                fn()

A step that raises is reported as ``FAILED`` and the exception goes on; :attr:`Progress.failed`
counts them.
"""

from __future__ import annotations

import contextlib
import sys
import time

__all__ = ["Progress", "is_tty"]


def is_tty(stream) -> bool:
    """Whether ``stream`` is an interactive terminal (a stream without ``isatty`` is not)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):   # no isatty, or a closed stream
        return False


class Progress:
    """Progress over ``total`` steps of a job called ``what``, written to ``stream`` (stderr by
    default).  ``tty=None`` asks the stream.  Every line starts with ``[done/total]``; the end
    line says how many steps ran, failed and the wall time."""

    def __init__(self, total: int | None, what: str = "", stream=None, tty: bool | None = None,
                 clock=time.perf_counter):
        self.total, self.what = total, what
        self.stream = stream if stream is not None else sys.stderr
        self.tty = is_tty(self.stream) if tty is None else tty
        self.clock = clock
        self.done = self.failed = 0
        self.t0 = clock()
        self._live = False          # a status line is on the terminal, not yet ended

    def _count(self) -> str:
        return f"[{self.done}/{self.total}]" if self.total is not None else f"[{self.done}]"

    def _write(self, text: str, final: bool) -> None:
        if self.tty:
            self.stream.write("\r" + text + "\x1b[K" + ("\n" if final else ""))
            self._live = not final
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()

    @contextlib.contextmanager
    def step(self, label: str):
        """One step: on a terminal ``[i/n] what label ...`` while it runs; then one line with
        ``ok``/``FAILED`` and its seconds (a terminal keeps failed lines, rewrites ok ones)."""
        start = self.clock()
        self._write(f"{self._count()} {self.what} {label} ...".replace("  ", " "), final=False)
        try:
            yield self
        except BaseException:
            self.done += 1
            self.failed += 1
            self._write(f"{self._count()} {self.what} {label} FAILED after {self.clock() - start:.1f} s"
                        .replace("  ", " "), final=True)
            raise
        self.done += 1
        self._write(f"{self._count()} {self.what} {label} ok {self.clock() - start:.1f} s".replace("  ", " "),
                    final=not self.tty)

    def note(self, text: str) -> None:
        """A line of its own (a terminal's status line is ended first)."""
        if self._live:
            self.stream.write("\n")
            self._live = False
        self.stream.write(text + "\n")
        self.stream.flush()

    def close(self) -> None:
        """The summary line: steps done, failed, seconds."""
        summary = f"{self.what}: {self.done} done, {self.failed} failed, {self.clock() - self.t0:.1f} s".lstrip(": ")
        self._write(summary, final=True)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

"""Step-by-step progress for the serve command's slow first run."""

from __future__ import annotations

import itertools
import sys
import threading
import time
from contextlib import contextmanager


class Progress:
    """Prints ``[n/N] step ... done (1.2s)``; on a terminal a spinner shows the wait."""

    def __init__(self, total: int, stream=None):
        self.total = total
        self.index = 0
        self.stream = stream or sys.stdout
        self.tty = self.stream.isatty()

    @contextmanager
    def step(self, title: str):
        self.index += 1
        label = f"[{self.index}/{self.total}] {title}"
        started = time.monotonic()
        stop = threading.Event()
        spinner = None
        if self.tty:
            spinner = threading.Thread(target=self._spin, args=(label, started, stop), daemon=True)
            spinner.start()
        else:
            self._write(f"{label} ...\n")
        status = {"note": ""}
        try:
            yield status
        except BaseException:
            stop.set()
            if spinner:
                spinner.join()
            self._write(f"\r\033[K{label} ... failed\n" if self.tty else f"{label} failed\n")
            raise
        stop.set()
        if spinner:
            spinner.join()
        took = time.monotonic() - started
        note = f" {status['note']}" if status["note"] else ""
        prefix = "\r\033[K" if self.tty else ""
        self._write(f"{prefix}{label} ... done ({took:.1f}s){note}\n")

    def detail(self, text: str) -> None:
        """A line under the current step (the spinner, on a terminal, goes on below it)."""
        self._write(f"\r\033[K      {text}\n" if self.tty else f"      {text}\n")

    def _spin(self, label: str, started: float, stop: threading.Event) -> None:
        for frame in itertools.cycle("|/-\\"):
            if stop.wait(0.2):
                return
            self._write(f"\r\033[K{label} ... {frame} {time.monotonic() - started:.0f}s")

    def _write(self, text: str) -> None:
        self.stream.write(text)
        self.stream.flush()

"""A process's own peak RSS, for the bench workers (standard library only: the peers'
interpreters import it too)."""

from __future__ import annotations

import resource
from pathlib import Path


def own_peak_rss_mib() -> float:
    """This process's peak RSS (VmHWM), in MiB. Not getrusage's ``ru_maxrss``: Linux keeps that
    across fork and exec, so a worker that a larger bench process started reported the bench's
    peak (1,114 MiB for both sides of bench/cpu_vs_llamacpp.py on 2026-11-25)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # no /proc: not Linux

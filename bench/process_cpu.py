"""CPU time of named processes between two moments, from /proc (Linux; elsewhere empty).

The API benches run the platform and their clients on the same cores, so a throughput that
drops can mean the platform did more work or that a client took the cores: this tells which
process used what over a span (user + system time of the process and its threads)."""

from __future__ import annotations

import os


def cpu_seconds(pid: int) -> float | None:
    """User + system CPU seconds of ``pid`` so far (None once it has gone or off Linux)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    # The command name (field 2) may hold spaces: fields after its closing parenthesis.
    fields = stat[stat.rindex(b")") + 2 :].split()
    utime, stime = int(fields[11]), int(fields[12])
    return (utime + stime) / os.sysconf("SC_CLK_TCK")


class ProcessCpu:
    """``mark()`` then ``since(mark)``: CPU seconds per name over that span."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def mark(self) -> dict[str, float | None]:
        return {name: cpu_seconds(pid) for name, pid in self.pids.items()}

    def since(self, mark: dict[str, float | None]) -> dict[str, float]:
        now = self.mark()
        return {
            name: now[name] - then
            for name, then in mark.items()
            if then is not None and now[name] is not None
        }

"""CPU time of named processes between two moments (bench.peers.cpu_seconds, from /proc).

The API benches run the platform and their clients on the same cores, so a throughput that
drops can mean the platform did more work or that a client took the cores: this tells which
process used what over a span (user + system time of the process and its threads)."""

from __future__ import annotations

from bench.peers import cpu_seconds


class ProcessCpu:
    """``mark()`` then ``since(mark)``: CPU seconds per name over that span; a process that
    was gone at either end is left out."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = dict(pids)

    def mark(self) -> dict[str, float | None]:
        return {name: _cpu_or_none(pid) for name, pid in self.pids.items()}

    def since(self, mark: dict[str, float | None]) -> dict[str, float]:
        now = self.mark()
        return {
            name: now[name] - then
            for name, then in mark.items()
            if then is not None and now[name] is not None
        }


def _cpu_or_none(pid: int) -> float | None:
    try:
        return cpu_seconds(pid)
    except OSError:  # gone (or no /proc)
        return None

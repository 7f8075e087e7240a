"""Lowering a process's CPU priority, for the processes that should yield a shared host's cores.

On one host (``bin/serve`` runs the API, Redis, the engine and Celery side by side) the
latency of a request is the sum of many short hops, each a process that wakes up, does a
fraction of a millisecond of work and sleeps again, while the engine (and the Batch API's
worker) would use every core for seconds. When a hop wakes onto a core the engine holds, it
waits its turn in the run queue; a lower priority for the bulk workers lets the hops run first.
Work-conserving: a process at a lower priority still takes every cycle nobody else wants.

Linux shares the CPU between autogroups (one per session, where the kernel has them) before
nice applies inside one, and the platform's launcher starts each process in a session of its
own, so a process that leads its session lowers its autogroup's priority as well as its own.
Nice is per thread on Linux: every thread that exists is lowered, and threads started later
inherit the value of the thread that starts them.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger(__name__)

# On a CPU device an engine shares the host's cores with the API and Redis, whose work for a
# request is a chain of short wake-ups; at this nice value they run first when they wake. On
# a 2-core VM (bench/prefix_routing.py, four engines, 2026-11-27) the routed TTFT p50 was
# 18-22% lower than at nice 0 in two A/B runs of five alternating rounds.
CPU_ENGINE_NICE = 5

AUTOGROUP = "/proc/self/autogroup"
TASKS = "/proc/self/task"


def lower_priority(nice: int, *, autogroup: str = AUTOGROUP, tasks: str = TASKS) -> list[str]:
    """Raise this process's nice value (each of its threads'), and its autogroup's, to at least
    ``nice`` (a process may lower its own priority without privileges). Returns what was
    changed, for the log; what this system does not offer is skipped."""
    changed: list[str] = []
    if nice <= 0:
        return changed
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current < nice:
        for tid in _thread_ids(tasks):
            try:
                if os.getpriority(os.PRIO_PROCESS, tid) < nice:
                    os.setpriority(os.PRIO_PROCESS, tid, nice)
            except OSError:  # the thread ended meanwhile
                continue
        os.setpriority(os.PRIO_PROCESS, 0, nice)  # this thread, also where /proc is absent
        changed.append(f"nice {current} -> {nice}")
    if os.getsid(0) != os.getpid():
        # The autogroup is the session's, shared with whatever started this process (a shell,
        # a test run): not this process's to lower.
        logger.debug("autogroup priority unchanged: this process does not lead its session")
        return changed
    try:
        with open(autogroup, "w") as f:
            f.write(str(nice))
        changed.append(f"autogroup nice {nice}")
    except OSError as exc:  # no autogroups (kernel option off, or not Linux), or refused
        logger.debug("autogroup priority unchanged: %s", exc)
    return changed


def _thread_ids(tasks: str) -> list[int]:
    try:
        return [int(tid) for tid in os.listdir(tasks)]
    except OSError:
        return []


def yield_cpu(device_type: str, nice: int | None) -> None:
    """Lower an engine's priority (before its service starts threads, which inherit it) to
    ``nice``, by default CPU_ENGINE_NICE on a CPU device and unchanged on a GPU. Only where the
    engine owns its process: served from another thread, it is embedded in a program (a test,
    a notebook) whose other threads it must not slow down."""
    if threading.current_thread() is not threading.main_thread():
        logger.debug("CPU priority unchanged: the engine is not its process's main thread")
        return
    if nice is None:
        nice = CPU_ENGINE_NICE if device_type == "cpu" else 0
    changed = lower_priority(nice)
    if changed:
        logger.info("the engine yields the CPU to the API and Redis: %s", ", ".join(changed))

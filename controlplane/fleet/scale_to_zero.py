"""Scale to zero's decisions as pure functions over plain values, tested without a database:
when a deployment is idle, and which one to evict so that a replica no node fits is placed.

A deployment's *activity* is the latest of: a request for its model (the API's last-use key),
a change of its wanted count (a wake, a scale), a change of one of its replicas (the last one:
becoming ready). Its engines running or queueing requests make it *busy*, whatever the time
(a long stream keeps its engine), and so does a replica placed and still coming up (the idle
clock starts when the engine is ready, not while it loads). Idle unload needs ``idle_timeout_s`` without activity;
eviction only EVICTION_MIN_IDLE_S, since it happens only when another model needs the room.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from controlplane.fleet.placement import Need, NodeRoom

# Never evict a deployment used this recently: requests waiting for a cold start touch their
# model's last use every second, so this also keeps two waking models from evicting each other.
EVICTION_MIN_IDLE_S = 5.0


@dataclass(frozen=True)
class Activity:
    last_active: float  # wall-clock seconds
    busy: bool = False

    def idle_for(self, now: float) -> float:
        return 0.0 if self.busy else max(0.0, now - self.last_active)


def is_idle(activity: Activity, *, now: float, idle_timeout_s: float) -> bool:
    """Should a scale-to-zero deployment with this activity go to 0 replicas now?"""
    return not activity.busy and now - activity.last_active >= idle_timeout_s


@dataclass(frozen=True)
class Placed:
    """A replica holding memory on a node: its deployment, its need, whether it drains, and
    its GPU."""

    deployment: str
    need: Need
    draining: bool = False
    gpu: int | None = None  # its GPU on the node (GPU memory is counted per GPU)


@dataclass
class NodeLoad:
    """A live node's capacity and the replicas placed on it."""

    name: str
    memory_bytes: int
    labels: Mapping[str, str] = field(default_factory=dict)
    gpu_memory_bytes: list[int] = field(default_factory=list)
    placed: list[Placed] = field(default_factory=list)

    def room(self, *, leaving: Callable[[Placed], bool]) -> NodeRoom:
        """What would be free once the replicas ``leaving`` says are gone."""
        room = NodeRoom(
            name=self.name,
            free_bytes=self.memory_bytes,
            labels=dict(self.labels),
            gpu_free_bytes=list(self.gpu_memory_bytes),
        )
        for replica in self.placed:
            if not leaving(replica):
                room.occupy(replica.need, replica.gpu)
        return room


@dataclass(frozen=True)
class Eviction:
    deployment: str  # to unload (all its replicas)
    node: str  # where ``need`` then fits


def fits_after_drains(need: Need, loads: Iterable[NodeLoad]) -> bool:
    """Will ``need`` fit on some node once the replicas already draining there are gone?
    Then it waits for them rather than evicting more."""
    for load in loads:
        room = load.room(leaving=lambda p: p.draining)
        if room.carries(need.selector) and room.fits(need):
            return True
    return False


def choose_eviction(
    need: Need,
    loads: Iterable[NodeLoad],
    candidates: Mapping[str, Activity],
    *,
    now: float,
    requester: str = "",
) -> Eviction | None:
    """The least recently active idle candidate (scale-to-zero deployments with replicas)
    whose unloading makes ``need`` fit on a node carrying its labels; None when none does.
    Ties go to the deployment's name, then the node's, so a pass is reproducible."""
    idle = [
        (activity.last_active, name)
        for name, activity in candidates.items()
        if name != requester and activity.idle_for(now) >= EVICTION_MIN_IDLE_S
    ]
    loads = sorted(loads, key=lambda load: load.name)
    for _, name in sorted(idle):
        for load in loads:
            if not any(p.deployment == name and not p.draining for p in load.placed):
                continue
            room = load.room(leaving=lambda p, name=name: p.draining or p.deployment == name)
            if room.carries(need.selector) and room.fits(need):
                return Eviction(deployment=name, node=load.name)
    return None

"""Rolling a deployment onto a new generation, one replica at a time.

A deployment's ``generation`` goes up when its engine settings change (``deployment_deploy``)
or when it is restarted (``deployment_restart``); each replica records the generation it was
created for. While some replicas are of an older generation, every reconciler pass asks
``plan`` what to do, and the pass does only that instead of its usual count-keeping:

1. old replicas that serve nothing (failed, or never placed) are stopped at once;
2. if fewer replicas hold a slot than wanted (a scale-up meanwhile, or step 1), new ones are
   created for the shortfall;
3. while any new replica is not ready yet (pending, starting, loading, or failed), nothing else
   happens: the old ones keep serving. A new one that fails stalls the rollout there, with
   the old replicas still up, until the next deploy retires it;
4. with every new replica ready: one new replica is created beyond the wanted count (a surge
   of one), or, when the surge is already there, an old one is set draining (its engine hands
   back what it has not started and finishes what it has; the stream's other readers take
   the rest). Then 3 again, until no old replica is left.

So capacity never drops below the wanted count of ready engines plus the one loading, and
requests never wait on an empty stream. Pure functions over the replica records, so the rules
are tested without processes.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from controlplane.fleet.models import Replica

State = Replica.State

# The old replica drained first: one that is not serving yet, then one on the node with the
# most replicas of the deployment (keeps them spread), then the oldest.
_DRAIN_ORDER = {State.PENDING: 0, State.STARTING: 1, State.LOADING: 2, State.READY: 3}


@dataclass
class RolloutStep:
    stop: list[Replica] = field(default_factory=list)  # old ones serving nothing
    drain: list[Replica] = field(default_factory=list)
    create: int = 0  # new replicas of the current generation
    waiting: bool = False  # a new replica is not ready yet

    def describe(self) -> str:
        return f"stop {len(self.stop)}, drain {len(self.drain)}, create {self.create}"


def current(generation: int, replicas: list[Replica]) -> list[Replica]:
    return [r for r in replicas if r.generation == generation]


def plan(*, generation: int, replicas: int, holding: list[Replica]) -> RolloutStep | None:
    """What this pass does for a deployment whose replicas holding a slot (running or failed)
    are ``holding``; None when none is of an older generation (or none is wanted: scaling to
    zero retires them all the usual way)."""
    old = [r for r in holding if r.generation != generation]
    if not old or replicas == 0:
        return None
    step = RolloutStep(stop=[r for r in old if r.state == State.FAILED or r.node_id is None])
    old = [r for r in old if r not in step.stop]
    new = current(generation, holding)
    serving = len(old) + len(new)
    if serving < replicas:
        step.create = replicas - serving
        return step
    step.waiting = any(r.state != State.READY for r in new)
    if step.waiting or not old:
        return step
    if serving == replicas:
        step.create = 1  # the surge
        return step
    # The surge was placed where the new generation is thinnest; drain beside it.
    counts = Counter(r.node_id for r in [*old, *new])
    ranked = sorted(old, key=lambda r: (_DRAIN_ORDER[r.state], -counts[r.node_id], r.pk))
    step.drain = ranked[: serving - replicas]
    return step

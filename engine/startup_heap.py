"""Keep the garbage collector's full passes short in a long-running process: an engine, and
the API's ASGI process (controlplane/asgi.py). Torch-free, so API processes import it too.

Once an engine has started it holds a few hundred thousand objects that live as long as it
does (torch, transformers, the model's modules, the tokenizer). CPython's full (generation 2)
collection walks every one of them: about 65 ms on the tiny model's engine, a step's stall at
a moment nothing chooses, which a short request arriving then adds to its time to first token
(it was the p99 of tenant B under a flood, bench/tenant_fairness.py). The API process holds
about 140,000 (Django, DRF, Channels, Twisted): 100-150 ms a pass, several a second under a
burst of requests. ``gc.freeze`` moves them to a permanent generation that collections skip;
what the process allocates while serving is still collected as before.
"""

from __future__ import annotations

import gc
import logging

logger = logging.getLogger(__name__)


def freeze_startup_heap() -> int:
    """Collect what start-up left behind, then exempt the survivors from later collections;
    returns how many objects were frozen."""
    gc.collect()
    gc.freeze()
    frozen = gc.get_freeze_count()
    logger.info("%d objects from start-up frozen out of garbage collection", frozen)
    return frozen

"""PEFT, the reference the engine's LoRA is checked against, imported when a test first asks.

Importing peft pulls in torch._dynamo, torch.distributed and sympy: 10 s or more, which every
pytest process (each xdist worker, each stage of bin/test) would pay while merely collecting
the suite if the test modules imported it at the top.
"""

from __future__ import annotations

from types import ModuleType


def peft() -> ModuleType:
    import peft as module

    return module

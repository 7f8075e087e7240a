"""The API's few threads for work that would hold the event loop: rendering chat templates and
tokenizing, in proportion to the prompt."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any, TypeVar

from django.conf import settings

T = TypeVar("T")
_executor: ThreadPoolExecutor | None = None


async def off_loop(function: Callable[..., T], /, *args: Any, **kwargs: Any) -> T:
    """``function(*args, **kwargs)`` in one of the API's ``API_TOKENIZER_THREADS`` threads.

    A few threads, not the default executor: each one holds the GIL for its Python work
    (templates), so fewer of them leave the event loop a larger share.
    """
    global _executor
    if _executor is None:
        _executor = ThreadPoolExecutor(
            max_workers=settings.API_TOKENIZER_THREADS, thread_name_prefix="tokenize"
        )
    call = functools.partial(function, *args, **kwargs)
    return await asyncio.get_running_loop().run_in_executor(_executor, call)

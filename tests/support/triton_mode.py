"""Put Triton in interpreter mode for the whole test session when there is no GPU.

Triton decides between interpreter and compiler when a ``@triton.jit`` function is defined:
for our kernels when their module is imported, for triton's own library (``tl.sum``,
``tl.zeros``, ...) when triton itself is imported. The root conftest calls this before any test
module can import triton (transformers and torch may), so kernel tests run in-process.
"""

from __future__ import annotations

import dataclasses
import os
import sys
import types


def import_triton_for_the_interpreter() -> bool:
    """True when this process can run Triton's kernels: a GPU is here, or the interpreter is on."""
    import torch

    if torch.cuda.is_available():
        return True
    try:
        if "triton" not in sys.modules:
            previous = os.environ.get("TRITON_INTERPRET")
            os.environ["TRITON_INTERPRET"] = "1"
            try:
                import triton.language
            finally:
                if previous is None:
                    del os.environ["TRITON_INTERPRET"]
                else:
                    os.environ["TRITON_INTERPRET"] = previous
        import triton.language.standard
    except ImportError:
        return False
    interpreted = type(triton.language.standard.zeros).__name__ == "InterpretedFunction"
    if interpreted:
        speed_up_the_interpreter()
    return interpreted


def speed_up_the_interpreter() -> None:
    """Spare Triton's interpreter work that changes nothing, about a fifth of its time on the
    engine's kernels (Triton 3.9; a Triton without these internals runs as it is, slower).

    - Patching the language at each device-function call. A kernel's launch patches
      ``triton.language`` (``tl.sum`` and the rest, to their NumPy versions) and restores it
      when the launch returns; every device-function call inside the launch (``tl.sum`` itself,
      a ``@triton.jit`` helper) patched it again, though it is still patched. Here such a call
      reaches Triton only if its module sees a language module (``tl``, ``tl.core``) not yet
      patched during this launch.
    - Overflow checks on 32-bit integer arithmetic: each add and multiply was computed again
      in 64 bits and compared with the bounds, for an assert that Triton drops unless its
      ``debug`` option is on (``device_assert`` in triton/language/semantic.py). Off unless
      ``debug`` is on.
    """
    import triton.language as tl
    from triton.runtime import interpreter

    try:
        patch_lang, launch = interpreter._patch_lang, interpreter.GridExecutor.__call__
        no_changes = interpreter._LangPatchScope
        builder = interpreter.interpreter_builder
        if not builder.options.debug:
            builder.options = dataclasses.replace(builder.options, sanitize_overflow=False)
    except (AttributeError, TypeError):
        return
    if getattr(patch_lang, "once_per_launch", False):
        return
    patched: set[int] = set()  # ids of the language modules patched since the launch began

    def launch_afresh(self, *args, **kwargs):
        patched.clear()
        return launch(self, *args, **kwargs)

    def patch_lang_once(fn):
        langs = {
            id(value)
            for value in fn.__globals__.values()
            if isinstance(value, types.ModuleType) and value in (tl, tl.core)
        }
        if langs and langs <= patched:
            return no_changes()
        patched.update(langs)
        return patch_lang(fn)

    patch_lang_once.once_per_launch = True
    interpreter._patch_lang = patch_lang_once
    interpreter.GridExecutor.__call__ = launch_afresh

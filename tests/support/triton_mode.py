"""Put Triton in interpreter mode for the whole test session when there is no GPU.

Triton decides between interpreter and compiler when a ``@triton.jit`` function is defined:
for our kernels when their module is imported, for triton's own library (``tl.sum``,
``tl.zeros``, ...) when triton itself is imported. The root conftest calls this before any test
module can import triton (transformers and torch may), so kernel tests run in-process.
"""

from __future__ import annotations

import os
import sys


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
    return type(triton.language.standard.zeros).__name__ == "InterpretedFunction"

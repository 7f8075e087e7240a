"""Runs this directory's tests in a fresh process when triton was imported too early here."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.kernels.conftest import INTERPRETER_IN_PROCESS

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
@pytest.mark.skipif(INTERPRETER_IN_PROCESS, reason="the kernel tests ran in this process")
def test_kernel_tests_pass_in_a_fresh_interpreter_process():
    env = {**os.environ, "TRITON_INTERPRET": "1"}
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "tests/kernels", "-q", "-p", "no:cacheprovider"],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=900,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
    assert " passed" in result.stdout

"""The served stack for structured outputs and tool calls: the real SmolLM2-135M-Instruct
(registered with ``manage.py load_model``, as an operator does) and a random-weight tiny
llama, each with its engine process, and Daphne. Started once for this directory."""

from __future__ import annotations

import pytest

from tests.support.platform_services import database_path, platform_stack
from tests.support.shared_database import FileDatabase
from tests.support.tools_stack import PREFIX, RANDOM, SMOLLM2, ToolsStack


@pytest.fixture(scope="package")
def stack(tmp_path_factory, smollm2, tiny_llama) -> ToolsStack:
    smollm2_dir, _lines = smollm2
    workdir = tmp_path_factory.mktemp("structured-e2e")
    with platform_stack(workdir, redis_prefix=PREFIX) as stack:
        db = FileDatabase(database_path(workdir), stack.redis_url)
        # Shared CI CPUs can starve a 135M model's steps for many seconds: a silence that
        # long is load here, not a lost engine, and a resumed sample is not what these test.
        db.env.update(stack.env, ENGINE_SILENCE_TIMEOUT="600")
        db.manage("load_model", str(smollm2_dir), "--name", SMOLLM2)
        db.manage("load_model", str(tiny_llama), "--name", RANDOM)
        db.manage("create_tenant", "Builders")
        key = db.create_key("Builders")
        stack.env = db.env
        base_url = stack.start_daphne(timeout=90)
        for path, name in ((smollm2_dir, SMOLLM2), (tiny_llama, RANDOM)):
            stack.start_engine(path, name, timeout=240, device="cpu", max_num_seqs=32)
        yield ToolsStack(base_url=base_url, api_key=key, db=db)

"""The served stack for structured outputs and tool calls as its tests see it: the two
models' names and the handle the ``stack`` fixture yields."""

from __future__ import annotations

from dataclasses import dataclass

from tests.support.sdk_clients import SdkClients
from tests.support.shared_database import FileDatabase

PREFIX = "sotools"
SMOLLM2 = "smollm2-135m-instruct"
RANDOM = "tiny-random"


@dataclass
class ToolsStack(SdkClients):
    base_url: str
    api_key: str
    db: FileDatabase

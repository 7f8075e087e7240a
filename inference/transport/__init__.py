"""The engine transport: how API processes reach engines over Redis.

What the rest of the API uses is exported here: the clients (generation and embeddings), the
engine request they send (with its OutputOptions), the chunks that come back and the errors
that end a request. The modules behind it are the transport's own: backpressure
(engine_capacity) and load on demand (cold_start), mid-stream failover (failover), lost-output
detection (output_continuity) and per-sample output processing (output_processor).
"""

from inference.transport.embeddings_client import EmbeddingsClient, EmbeddingTokenizer
from inference.transport.engine_capacity import (
    AdapterLoading,
    EngineOverloaded,
    EngineUnavailable,
)
from inference.transport.engine_client import (
    EngineClient,
    EngineError,
    EngineRefusal,
    EngineTimeout,
)
from inference.transport.engine_request import EngineRequest, OutputOptions
from inference.transport.output_processor import GenerationChunk, TokenLogprob

__all__ = [
    "AdapterLoading",
    "EmbeddingTokenizer",
    "EmbeddingsClient",
    "EngineClient",
    "EngineError",
    "EngineOverloaded",
    "EngineRefusal",
    "EngineRequest",
    "EngineTimeout",
    "EngineUnavailable",
    "GenerationChunk",
    "OutputOptions",
    "TokenLogprob",
]

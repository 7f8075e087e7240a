"""Served models: checkpoints registered with the platform and the engines that serve them."""

from pathlib import Path

from django.db import models

from controlplane.deployments.reasoning_parsers import REASONING_PARSER_CHOICES
from controlplane.deployments.tool_parsers import TOOL_PARSER_CHOICES, default_tool_parser

# Cross-encoders (rerankers): a sequence-classification head with one label scores
# (query, document) pairs on /v1/rerank and /v1/score.
CROSS_ENCODER_ARCHITECTURES = frozenset(
    {
        "BertForSequenceClassification",
        "RobertaForSequenceClassification",
        "XLMRobertaForSequenceClassification",
    }
)
# Architectures served by a pooling engine (embeddings, or a cross-encoder's relevance scores)
# rather than a generation engine.
POOLING_ARCHITECTURES = (
    frozenset({"BertModel", "XLMRobertaModel", "MPNetModel"}) | CROSS_ENCODER_ARCHITECTURES
)


class ServedModel(models.Model):
    """A Hugging Face checkpoint the platform serves under ``name``.

    Registering from the admin saves the row ``registering`` and a Celery task downloads (a hub
    id), converts (a GGUF file) and validates it, recording its stage and progress here, then
    marks it ``ready`` or ``failed``; only a ready, active model is served or deployed.
    """

    class State(models.TextChoices):
        REGISTERING = "registering"
        READY = "ready"
        FAILED = "failed"

    name = models.CharField(max_length=200, unique=True)
    # The checkpoint engines load; until a registration is ready, what the operator gave.
    path = models.CharField(max_length=1000)
    source = models.CharField(
        max_length=1000,
        blank=True,
        default="",
        help_text="What was registered: a path on the server, or a Hugging Face hub id "
        "(org/name, optionally @revision).",
    )
    # Rows made before registration ran in the background, and load_model's, are ready.
    state = models.CharField(
        max_length=20, choices=State.choices, default=State.READY, editable=False
    )
    stage = models.CharField(max_length=300, blank=True, default="", editable=False)
    # Bytes (or steps) of the current stage done and expected; 0 of 0 when it has no measure.
    progress_done = models.BigIntegerField(default=0, editable=False)
    progress_total = models.BigIntegerField(default=0, editable=False)
    failure_reason = models.TextField(blank=True, default="", editable=False)
    architecture = models.CharField(max_length=100)
    dtype = models.CharField(max_length=20, default="float32")
    num_parameters = models.BigIntegerField(default=0)
    max_model_len = models.PositiveIntegerField(default=2048)
    completions_only = models.BooleanField(
        default=False,
        help_text="The checkpoint has no chat template: /v1/chat/completions refuses it, "
        "/v1/completions serves it.",
    )
    tool_parser = models.CharField(
        max_length=32,
        blank=True,
        default="",
        choices=[("", "Automatic (from the architecture)"), *TOOL_PARSER_CHOICES],
        help_text="The format the model writes tool calls in, which tool_choice 'auto' parses. "
        "Set at registration from the architecture and chat template.",
    )
    reasoning_parser = models.CharField(
        max_length=32,
        blank=True,
        default="",
        choices=[("", "None (the whole output is the answer)"), *REASONING_PARSER_CHOICES],
        help_text="How the model's thinking is told from its answer (returned as "
        "reasoning_content / reasoning). Set at registration from the chat template.",
    )
    drop_attribution_header = models.BooleanField(
        default=True,
        help_text="Drop the per-turn attribution line Claude Code puts first in its system "
        "prompt (x-anthropic-billing-header: ...; cch=...;) before templating, so that turn two "
        "of a conversation reuses turn one's prefix cache (/v1/messages only; docs/api.md).",
    )
    quantization = models.CharField(
        max_length=8,
        blank=True,
        default="",
        choices=[("", "None (the checkpoint's weights)"), ("int8", "int8"), ("int4", "int4")],
        help_text="Weight-only quantization the engine applies at load (CPU engines); set with "
        "load_model --quantization.",
    )
    speculative_decoding = models.BooleanField(
        default=False,
        help_text="Engines of this model verify draft tokens proposed from the prompt and the "
        "tenant's recent outputs (no draft model); output is unchanged, speed grows on work "
        "that copies from its context. Requests may opt out; engines back off under load. "
        "Takes effect when its engines start. Off by default until it pays on this hardware: "
        "docs/benchmarks.md.",
    )
    is_active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_ready(self) -> bool:
        return self.state == self.State.READY

    @property
    def progress_percent(self) -> int | None:
        if self.progress_total <= 0:
            return None
        return min(100, self.progress_done * 100 // self.progress_total)

    @property
    def effective_tool_parser(self) -> str:
        """``tool_parser``, or the architecture's default when it was left automatic."""
        return self.tool_parser or default_tool_parser(self.architecture)

    @property
    def is_cross_encoder(self) -> bool:
        """A reranker: scores (query, document) pairs (/v1/rerank, /v1/score), embeds nothing."""
        return self.architecture in CROSS_ENCODER_ARCHITECTURES

    @property
    def is_embedding(self) -> bool:
        """Served by a pooling engine (/v1/embeddings, /v1/rerank, /v1/score; a cross-encoder
        too) rather than a generation engine."""
        if self.architecture in POOLING_ARCHITECTURES:
            return True
        # sentence-transformers checkpoints describe their pooling in modules.json.
        return (Path(self.path) / "modules.json").is_file()

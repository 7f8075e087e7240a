"""What a path given to ``load_model`` holds, and how it becomes a checkpoint engines serve.

Five kinds: a Hugging Face safetensors directory with a chat template (chat and completions),
one without (completions only), a sentence-transformers directory (embeddings, has
modules.json), a cross-encoder (a one-label sequence-classification head: rerank and score),
and a GGUF file or a directory holding one, converted once to a safetensors
checkpoint under VAR_DIR/models/gguf. Everything here reads config files, safetensors headers
and tokenizers only; the conversion runs ``python -m engine.tooling.gguf_convert`` in a subprocess, so
the control plane never imports torch.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

from django.conf import settings

from controlplane.deployments.models import CROSS_ENCODER_ARCHITECTURES, POOLING_ARCHITECTURES
from controlplane.deployments.reasoning_parsers import default_reasoning_parser
from controlplane.deployments.tool_parsers import default_tool_parser

Progress = Callable[[str], None]


class ModelRegistrationError(ValueError):
    """The checkpoint cannot be served; the message says what is wrong."""


def no_progress(_: str) -> None:
    pass


@dataclass(frozen=True)
class Checkpoint:
    """What a served model records about its checkpoint (ServedModel's fields of that name)."""

    path: str
    architecture: str
    dtype: str
    num_parameters: int
    max_model_len: int
    completions_only: bool = False
    tool_parser: str = ""
    reasoning_parser: str = ""

    def fields(self) -> dict:
        return asdict(self)


def checkpoint_inspect(*, path: str | Path, progress: Progress = no_progress) -> Checkpoint:
    """Check everything the engine and the API will need of ``path``; GGUF files are converted
    (once) first. Raises ModelRegistrationError when it cannot be served."""
    source = Path(path).expanduser()
    gguf_file = gguf_file_in(source)
    if gguf_file is not None:
        source = gguf_convert(
            gguf_file=gguf_file, out_dir=gguf_cache_dir(gguf_file), progress=progress
        )
    if _architecture(source) in CROSS_ENCODER_ARCHITECTURES:
        return _cross_encoder_checkpoint(source.resolve(), progress)
    if (source / "modules.json").is_file():
        return _embedding_checkpoint(source.resolve(), progress)
    return _generation_checkpoint(source, progress)


def _generation_checkpoint(path: Path, progress: Progress) -> Checkpoint:
    from engine.checkpoint_info import CheckpointError, inspect_checkpoint
    from engine.text.tokenizer import ChatTokenizer, TokenizerError

    progress("reading config.json and safetensors headers")
    try:
        info = inspect_checkpoint(path)
    except CheckpointError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    progress(
        f"architecture {info.architecture}, {info.num_parameters / 1e6:.1f}M parameters, "
        f"{info.dtype}, {info.num_bytes / 2**20:.1f} MiB, context {info.max_model_len}"
    )
    progress("loading the tokenizer")
    try:
        tokenizer = ChatTokenizer(info.path)
    except TokenizerError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    if tokenizer.eos_token_id is None:
        raise ModelRegistrationError("the tokenizer defines no EOS token; generation cannot stop")
    completions_only = not tokenizer.chat_template
    if completions_only:
        progress(
            "no chat template (tokenizer_config.json chat_template or chat_template.jinja): "
            "a base model, served on /v1/completions only"
        )
    else:
        progress("rendering the chat template")
        try:
            rendered = tokenizer.render_chat([{"role": "user", "content": "Hello"}])
        except TokenizerError as exc:
            raise ModelRegistrationError(str(exc)) from exc
        if "Hello" not in rendered:
            raise ModelRegistrationError("the chat template drops the message content")
    return Checkpoint(
        path=str(info.path),
        architecture=info.architecture,
        dtype=info.dtype,
        num_parameters=info.num_parameters,
        max_model_len=info.max_model_len,
        completions_only=completions_only,
        tool_parser=default_tool_parser(info.architecture, tokenizer.chat_template),
        reasoning_parser=default_reasoning_parser(tokenizer.chat_template),
    )


def _embedding_checkpoint(path: Path, progress: Progress) -> Checkpoint:
    """A sentence-transformers checkpoint, served by ``python -m engine.pooling``."""

    progress("reading config.json, sentence_bert_config.json and safetensors headers")
    config = _read_json(path / "config.json")
    architecture = (config.get("architectures") or ["BertModel"])[0]
    if architecture not in POOLING_ARCHITECTURES:
        raise ModelRegistrationError(
            f"architecture {architecture} is not an embedding model this platform serves; "
            f"it serves {', '.join(sorted(POOLING_ARCHITECTURES))}"
        )
    num_parameters, dtype = _safetensors_totals(path)
    # sentence-transformers cuts inputs at max_seq_length, the length the model was trained
    # on, whatever its position table allows; the API refuses longer ones.
    sentence_file = path / "sentence_bert_config.json"
    sentence_config = _read_json(sentence_file) if sentence_file.is_file() else {}
    max_len = int(
        sentence_config.get("max_seq_length") or config.get("max_position_embeddings") or 512
    )
    progress(
        f"embeddings: architecture {architecture}, {num_parameters / 1e6:.1f}M parameters, "
        f"{dtype}, inputs up to {max_len} tokens"
    )
    return _pooling_checkpoint(
        path,
        architecture=architecture,
        dtype=dtype,
        num_parameters=num_parameters,
        max_len=max_len,
        progress=progress,
    )


def _pooling_checkpoint(
    path: Path,
    *,
    architecture: str,
    dtype: str,
    num_parameters: int,
    max_len: int,
    progress: Progress,
) -> Checkpoint:
    """The checkpoint of an embeddings model or cross-encoder, once its tokenizer loads."""
    from engine.text.tokenizer import ChatTokenizer, TokenizerError

    progress("loading the tokenizer")
    try:
        ChatTokenizer(path)
    except TokenizerError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    return Checkpoint(
        path=str(path),
        architecture=architecture,
        dtype=dtype,
        num_parameters=num_parameters,
        max_model_len=max_len,
    )


def _architecture(path: Path) -> str:
    """The first architecture config.json names ("" when it names none or cannot be read:
    the checks of each kind say what is wrong)."""
    try:
        config = json.loads((path / "config.json").read_text())
        return str((config.get("architectures") or [""])[0])
    except (OSError, ValueError, AttributeError, TypeError):
        return ""


def _cross_encoder_checkpoint(path: Path, progress: Progress) -> Checkpoint:
    """A reranker (sentence-transformers' CrossEncoder, a bge or ms-marco reranker), served
    by ``python -m engine.pooling`` on /v1/rerank and /v1/score."""
    from engine.checkpoint_info import cross_encoder_num_labels

    progress("reading config.json and safetensors headers")
    config = _read_json(path / "config.json")
    architecture = config["architectures"][0]
    num_labels = cross_encoder_num_labels(config)
    if num_labels != 1:
        raise ModelRegistrationError(
            f"{architecture} with {num_labels} labels is a classifier, not a cross-encoder "
            "(a reranker's head has one label); it cannot be served"
        )
    num_parameters, dtype = _safetensors_totals(path)
    # RoBERTa-style position tables start after the padding index: two positions fewer.
    max_len = int(config.get("max_position_embeddings") or 512)
    if config.get("model_type") in ("roberta", "xlm-roberta"):
        max_len -= 2
    tokenizer_config = path / "tokenizer_config.json"
    if tokenizer_config.is_file():
        trained = _read_json(tokenizer_config).get("model_max_length")
        if isinstance(trained, int) and 0 < trained < max_len:
            max_len = trained
    progress(
        f"cross-encoder (reranker): architecture {architecture}, "
        f"{num_parameters / 1e6:.1f}M parameters, {dtype}, pairs up to {max_len} tokens"
    )
    return _pooling_checkpoint(
        path,
        architecture=architecture,
        dtype=dtype,
        num_parameters=num_parameters,
        max_len=max_len,
        progress=progress,
    )


def _read_json(file: Path) -> dict:
    if not file.is_file():
        raise ModelRegistrationError(f"{file.parent} has no {file.name}")
    try:
        return json.loads(file.read_text())
    except ValueError as exc:
        raise ModelRegistrationError(f"{file.name} is not valid JSON: {exc}") from exc


# Integer tensors in a checkpoint are buffers (BERT's position_ids), not parameters.
def _safetensors_totals(path: Path) -> tuple[int, str]:
    """(parameter count, the dtype most parameters have) from the safetensors headers."""
    from engine.checkpoint_info import CheckpointError, safetensors_totals

    try:
        totals = safetensors_totals(path)
    except CheckpointError as exc:
        raise ModelRegistrationError(str(exc)) from exc
    return totals.num_parameters, totals.dtype


def gguf_file_in(path: Path) -> Path | None:
    """The GGUF file ``path`` names: itself, or the one .gguf in a directory without
    config.json; None for anything else."""
    if path.is_file() and path.suffix == ".gguf":
        return path.resolve()
    if not path.is_dir() or (path / "config.json").is_file():
        return None
    found = sorted(path.glob("*.gguf"))
    if len(found) > 1:
        raise ModelRegistrationError(
            f"{path} holds {len(found)} .gguf files ({', '.join(f.name for f in found)}); "
            "name the one to load"
        )
    return found[0].resolve() if found else None


def gguf_cache_dir(gguf_file: Path) -> Path:
    """Where the conversion of ``gguf_file`` is kept: keyed by its content, so the same file
    converts once wherever it lies, and a changed file converts again."""
    from engine.tooling.gguf_convert import gguf_content_key

    return Path(settings.VAR_DIR) / "models" / "gguf" / gguf_content_key(gguf_file)


def gguf_convert(*, gguf_file: Path, out_dir: Path, progress: Progress = no_progress) -> Path:
    """The safetensors checkpoint of ``gguf_file`` in ``out_dir``, converted unless done before
    (the converter renames ``out_dir`` into place only once complete)."""
    if (out_dir / "config.json").is_file():
        progress(f"{gguf_file.name} was converted before: {out_dir}")
        return out_dir
    progress(f"converting {gguf_file.name} to a safetensors checkpoint in {out_dir}")
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "engine.tooling.gguf_convert", str(gguf_file), str(out_dir)]
    lines: list[str] = []
    with subprocess.Popen(
        command,
        cwd=settings.BASE_DIR,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        bufsize=1,
    ) as process:
        try:
            for line in process.stdout:
                lines.append(line.rstrip())
                progress(lines[-1])
        except BaseException:  # Ctrl-C, or serve told to stop: leave no conversion behind
            process.kill()
            raise
    if process.returncode != 0:
        error = next((ln for ln in reversed(lines) if ln.startswith("error: ")), None)
        reason = error.removeprefix("error: ") if error else "\n".join(lines[-10:])
        raise ModelRegistrationError(f"converting {gguf_file.name} failed: {reason}")
    return out_dir

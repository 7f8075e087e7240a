"""Storing uploaded adapter files: the two PEFT files, given as files or inside a zip.

Uploads land in a fresh directory under ``ADAPTER_UPLOAD_DIR`` (default ``var/adapters``);
only the two expected file names are ever written, each under ``ADAPTER_MAX_BYTES``.
"""

from __future__ import annotations

import secrets
import shutil
import zipfile
from collections.abc import Iterable
from pathlib import Path, PurePosixPath
from typing import IO, Any

from django.conf import settings
from django.core.exceptions import ValidationError

# The files of a PEFT adapter (the same names engine.lora.validation reads; not imported from
# there so that API processes never load the engine package's LoRA code).
ADAPTER_FILES = ("adapter_config.json", "adapter_model.safetensors")
_CHUNK = 1 << 20


def _max_adapter_bytes() -> int:
    return int(getattr(settings, "ADAPTER_MAX_BYTES", 4 << 30))


def _upload_root() -> Path:
    root = getattr(settings, "ADAPTER_UPLOAD_DIR", None)
    return Path(root) if root else Path(settings.VAR_DIR) / "adapters"


def store_upload(*, name: str, files: Iterable[Any] = (), archive: IO[bytes] | None = None) -> Path:
    """Write the upload into a new directory and return it; ValidationError leaves nothing.

    ``files`` are file objects named ``adapter_config.json`` and ``adapter_model.safetensors``
    (Django's UploadedFile, or any object with ``name`` and ``read``).
    """
    directory = _upload_root() / f"{name.replace('/', '_')}-{secrets.token_hex(4)}"
    directory.mkdir(parents=True)
    try:
        if archive is not None:
            _extract_archive(archive, directory)
        for file in files:
            _store_file(file, directory)
        missing = [f for f in ADAPTER_FILES if not (directory / f).is_file()]
        if missing:
            raise ValidationError(f"the upload lacks {', '.join(missing)}")
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return directory


def _store_file(file: Any, directory: Path) -> None:
    filename = PurePosixPath(str(getattr(file, "name", ""))).name
    if filename not in ADAPTER_FILES:
        raise ValidationError(
            f"unexpected file {filename!r}; upload {' and '.join(ADAPTER_FILES)} (or a zip)"
        )
    chunks = (
        file.chunks(_CHUNK) if hasattr(file, "chunks") else iter(lambda: file.read(_CHUNK), b"")
    )
    _write_limited(chunks, directory / filename)


def _write_limited(chunks: Iterable[bytes], target: Path) -> None:
    limit, written = _max_adapter_bytes(), 0
    with target.open("wb") as out:
        for chunk in chunks:
            written += len(chunk)
            if written > limit:
                raise ValidationError(f"{target.name} is larger than {limit} bytes")
            out.write(chunk)


def _extract_archive(archive: IO[bytes], directory: Path) -> None:
    """Copy the two adapter files out of a zip (at its root or in one folder); ignore the rest.

    Only those two names are ever written, so no entry can escape ``directory``.
    """
    try:
        with zipfile.ZipFile(archive) as zf:
            found: dict[str, zipfile.ZipInfo] = {}
            for info in zf.infolist():
                base_name = PurePosixPath(info.filename).name
                if base_name in ADAPTER_FILES and not info.is_dir():
                    if base_name in found:
                        raise ValidationError(f"the zip holds more than one {base_name}")
                    found[base_name] = info
            for base_name, info in found.items():
                with zf.open(info) as src:
                    _write_limited(
                        iter(lambda src=src: src.read(_CHUNK), b""), directory / base_name
                    )
    except zipfile.BadZipFile as exc:
        raise ValidationError(f"the archive is not a readable zip file: {exc}") from exc

"""Files only the platform's user may read (mode 0600), written so no reader sees half of one.

The generated secret key and the running platform's location live in such files. Nothing here
imports Django: settings use it while they load.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path


def _write_temporary(directory: Path, text: str) -> Path:
    """A new file in ``directory`` (mkstemp makes it 0600) holding ``text``, flushed to disk."""
    directory.mkdir(parents=True, exist_ok=True)
    fd, name = tempfile.mkstemp(dir=directory, prefix=".tmp-")
    with os.fdopen(fd, "w") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    return Path(name)


def write_private_file(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` in one step, mode 0600."""
    temporary = _write_temporary(path.parent, text)
    os.replace(temporary, path)


def read_or_create_private_file(path: Path, make: Callable[[], str]) -> str:
    """The content of ``path``; on first use, ``make()`` written there with mode 0600.

    Processes that start together (serve's children) all get the same content: the file
    appears complete under its name or not at all (a hard link cannot replace a file), and
    whoever loses the race reads the winner's.
    """
    try:
        return path.read_text()
    except FileNotFoundError:
        pass
    temporary = _write_temporary(path.parent, make())
    try:
        os.link(temporary, path)
    except FileExistsError:
        pass
    finally:
        temporary.unlink()
    return path.read_text()

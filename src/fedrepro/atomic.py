"""Files written all at once: a job killed mid-write leaves the old file or none, never half a file.

The lowest floor of the package (the standard library only): the pipeline, the code fingerprints and
every job write through it.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def atomic_write(path: str | os.PathLike, write: Callable[[Path], Any]) -> Path:
    """Write `path` all at once: `write(tmp)` fills a temporary file in the same folder, which
    then replaces `path` (os.replace is atomic), so a job killed mid-write leaves the old file
    or none, never half a file. Use it for every file a later job or a resume reads."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(prefix=_prefix(path), suffix=_suffix(path), dir=path.parent)
    os.close(handle)
    try:
        write(Path(tmp))
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; results are shared like any file
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    return atomic_write(path, lambda tmp: tmp.write_text(text))


def remove_stray_temporaries(path: str | os.PathLike) -> list[Path]:
    """Delete the temporary files that writers of `path` killed mid-write left beside it (call it
    only where no other process is writing `path`, e.g. when a job resumes); returns what it deleted."""
    path = Path(path)
    stray = sorted(path.parent.glob(f"{_prefix(path)}*{_suffix(path)}"))
    for tmp in stray:
        tmp.unlink(missing_ok=True)
    return stray


def _prefix(path: Path) -> str:
    return f".{path.stem}."


def _suffix(path: Path) -> str:
    # the temporary name keeps the suffix: np.savez would append ".npz" to any other name
    return f".tmp{path.suffix}"

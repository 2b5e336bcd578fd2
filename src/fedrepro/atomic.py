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
    # the temporary name keeps the suffix: np.savez would append ".npz" to any other name
    handle, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=f".tmp{path.suffix}", dir=path.parent)
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

"""Writing files so that nothing is lost or half-written: atomic writes and run directories.

Every file spotref writes goes through ``atomic_write``: the bytes go to a temporary file in
the destination's own directory, which is flushed, fsynced and then renamed over the
destination (``os.replace``, atomic on POSIX and Windows). A crash or Ctrl-C mid-write leaves
the old file intact and no temporary file behind; a reader never sees half a file.

Tools write into a fresh run directory (``run_dir``, under the git-ignored ``runs/``) unless
told otherwise: shipped files (``docs/results.md``, ``spotref/order_models/*.pt``) are only
replaced behind an explicit ``--update-shipped``.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
import time
from pathlib import Path

RUNS = Path("runs")


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends
    without an error (for writers that want a file name, as ``safetensors.save_file``).

    The parent directory is created. On any error (KeyboardInterrupt included) the temporary
    file is removed and ``path`` is left as it was.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:                     # on disk before the rename
            os.fsync(f.fileno())
        os.chmod(tmp, _mode(path))                      # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def atomic_write(path, write_fn, binary: bool = True) -> Path:
    """Call ``write_fn(f)`` on a temporary file beside ``path``, then rename it onto ``path``."""
    with atomic_path(path) as tmp:
        with open(tmp, "wb" if binary else "w", **({} if binary else {"encoding": "utf-8"})) as f:
            write_fn(f)
    return Path(path)


def _mode(path: Path) -> int:
    """The existing file's permissions, else what a plain ``open`` would give (umask applied)."""
    try:
        return path.stat().st_mode & 0o777
    except FileNotFoundError:
        mask = os.umask(0)
        os.umask(mask)
        return 0o666 & ~mask


def atomic_write_text(path, text: str) -> Path:
    """``Path(path).write_text(text)`` (UTF-8), atomically."""
    return atomic_write(path, lambda f: f.write(text), binary=False)


def atomic_write_bytes(path, data: bytes) -> Path:
    return atomic_write(path, lambda f: f.write(data))


def atomic_save(obj, path) -> Path:
    """``torch.save(obj, path)``, atomically."""
    import torch
    return atomic_write(path, lambda f: torch.save(obj, f))


def run_dir(tool: str, root=RUNS) -> Path:
    """A new directory ``root/TOOL-YYYYmmdd-HHMMSS[-k]`` for one run's outputs (created)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    for k in range(1000):
        d = Path(root, f"{tool}-{stamp}" + (f"-{k}" if k else ""))
        try:
            d.mkdir(parents=True)
            return d
        except FileExistsError:
            continue
    raise RuntimeError(f"cannot create a run directory under {root}")

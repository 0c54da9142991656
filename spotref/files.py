"""Writing files so that nothing is lost or half-written: atomic writes and run directories.

Every file spotref writes goes through ``atomic_write``: the bytes go to a temporary file in
the destination's own directory, which is flushed, fsynced and then renamed over the
destination (``os.replace``, atomic on POSIX and Windows). A crash or Ctrl-C mid-write leaves
the old file intact and no temporary file behind; a reader never sees half a file.

A kill (SIGKILL) cannot run the cleanup: it leaves ``.NAME.PID.XXXX.tmp`` beside the
destination. The next write to the same destination removes such files whose process is gone.

**The write guard** (``check_writable``, called by every writer here before any byte is written):
nothing inside the installed ``spotref`` package (the bundled targets and drafters) or a
checkout's ``docs/`` is written unless the caller is inside ``shipped_writes()`` (the tools enter
it for ``--update-shipped``, functions for ``update_shipped=True``), whatever the spelling of the
path (relative, ``..``, symbolic links: the resolved path is what counts). Tools write into a
fresh run directory (``run_dir``, under the git-ignored ``runs/``) unless told otherwise.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import re
import shutil
import tempfile
import time
import zipfile
from pathlib import Path

RUNS = Path("runs")
PACKAGE = Path(__file__).resolve().parent  # the installed spotref package
CHECKOUT_DOCS = PACKAGE.parent / "docs"  # a source checkout's docs/
_SHIPPED_WRITES = contextvars.ContextVar("spotref_shipped_writes", default=False)
# The write guard's one piece of state: True inside ``shipped_writes()``. A context variable, so
# the permission belongs to the code inside the block (its thread or asyncio task) and ends with
# it: another thread, or a task started elsewhere, still sees False.


@contextlib.contextmanager
def shipped_writes(allowed: bool = True):
    """Within the block (when ``allowed``), writers may replace shipped files; a block with
    ``allowed`` False keeps what the enclosing block allows."""
    token = _SHIPPED_WRITES.set(bool(allowed) or _SHIPPED_WRITES.get())
    try:
        yield
    finally:
        _SHIPPED_WRITES.reset(token)


def shipped(path) -> bool:
    """Whether ``path`` (resolved) lies inside the package or a checkout's docs/."""
    p = Path(os.path.realpath(os.fspath(path)))
    roots = [PACKAGE] + ([CHECKOUT_DOCS] if (PACKAGE.parent / "pyproject.toml").exists() else [])
    return any(p == r or r in p.parents for r in roots)


def check_writable(path) -> Path:
    """``path`` as a ``Path``, or ``ValueError`` naming it: not a str or path, a shipped file
    outside ``shipped_writes()``, a directory, a pipe or a device (``/dev/null``: the rename that
    ends an atomic write would replace it), or a directory that cannot be created or written (a read-only
    one, one without any write permission bit, is refused even for a superuser). Tools call it
    on their outputs before any work; every writer here calls it before writing."""
    if isinstance(path, bytes) or not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ValueError(f"an output path must be a non-empty str or path, got {path!r}")
    if os.fspath(path).endswith((os.sep, "/")):
        raise ValueError(f"{os.fspath(path)!r} ends with a separator: it names a folder, not a file to write")
    path = Path(path)
    d = link_to_nothing(path.parent)  # mkdir cannot make a folder where a link leads nowhere
    if d is not None:
        raise ValueError(f"{path} cannot be written: {d} is a link to {os.readlink(d)}, which does not exist")
    if path.is_symlink():  # the file it leads to is what gets written (the link stays): check that
        real = Path(os.path.realpath(path))
        if not real.exists() and not real.parent.is_dir():
            raise ValueError(
                f"{path} is a link to {real}, whose folder {real.parent} does not exist: spotref creates no "
                f"folders where a link leads; make the folder, or write elsewhere"
            )
        if real.exists() and not real.is_file() or not real.exists() and real.parent.is_relative_to("/proc"):
            raise ValueError(
                f"{path} leads to {real}, which is not a regular file (a pipe, a device or a socket): spotref "
                f"writes a file whole and renames it onto its path; write to a file"
            )
        check_writable(real)
    if shipped(path) and not _SHIPPED_WRITES.get():
        raise ValueError(
            f"{path} is a shipped file (inside the spotref package or docs/): pass "
            f"--update-shipped (update_shipped=True) to replace it, or write elsewhere"
        )
    parent = next((d for d in [path.parent, *path.parent.parents] if d.exists()), Path("."))
    if path.exists() and path.is_dir():
        raise ValueError(f"{path} is a directory, not a file to write")
    if path.exists() and not path.is_file():  # an atomic write would replace /dev/null with a file
        raise ValueError(
            f"{path} is not a regular file (a pipe, a device or a socket): spotref writes a file whole "
            f"and renames it onto its path, which would replace {path}; write to a file"
        )
    if not parent.is_dir() or not os.access(parent, os.W_OK | os.X_OK):
        raise ValueError(f"{path} cannot be written: {parent} is not a writable directory")
    if not parent.stat().st_mode & 0o222:  # os.access says yes to a superuser
        raise ValueError(f"{path} cannot be written: {parent} is read-only (no write permission): refused, not changed")
    return path


def link_to_nothing(path: Path) -> Path | None:
    """The first of ``path`` and its parents that is a symbolic link leading nowhere, or None."""
    return next((d for d in [path, *path.parents] if d.is_symlink() and not d.exists()), None)


def make_folder(path) -> Path:
    """``path`` made as a folder (its parents too) and returned, or ``ValueError`` naming it: a
    link that leads nowhere, or something that is not a folder, is not made into one."""
    path = Path(path)
    d = link_to_nothing(path)
    if d is not None:
        raise ValueError(f"{path} cannot be made a folder: {d} is a link to {os.readlink(d)}, which does not exist")
    if path.exists() and not path.is_dir():
        raise ValueError(f"{path} is not a folder (a file of that name exists)")
    path.mkdir(parents=True, exist_ok=True)
    return path


def clean_stale(path: Path) -> None:
    """Remove ``.NAME.PID.XXXX.tmp`` files (and directories) beside ``path`` left by a process
    that is gone."""
    pattern = re.compile(rf"^\.{re.escape(path.name)}\.(\d+)\.[^/]+\.tmp$")
    for f in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        m = pattern.match(f.name)
        if m and not _alive(int(m.group(1))):
            shutil.rmtree(f, ignore_errors=True) if f.is_dir() else f.unlink(missing_ok=True)


def glob_escape(name: str) -> str:
    return re.sub(r"([*?\[])", r"[\1]", name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@contextlib.contextmanager
def atomic_path(path):
    """A temporary path beside ``path`` to write to; renamed onto ``path`` when the block ends
    without an error (for writers that want a file name, as ``safetensors.save_file``).

    The parent directory is created. On any error (KeyboardInterrupt included) the temporary
    file is removed and ``path`` is left as it was. ``check_writable`` first. A ``path`` that is a
    symbolic link stays one: the file it leads to is replaced (``--trace /dev/stdout`` with the
    output redirected to a file replaces that file, never the link in /dev).
    """
    path = check_writable(path)
    path = Path(os.path.realpath(path)) if path.is_symlink() else path  # a link stays one: its file is replaced
    path.parent.mkdir(parents=True, exist_ok=True)
    clean_stale(path)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp")
    os.close(fd)
    try:
        yield Path(tmp)
        with open(tmp, "rb+") as f:  # on disk before the rename
            os.fsync(f.fileno())
        os.chmod(tmp, _mode(path))  # mkstemp makes 0600 files
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


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
        return 0o666 & ~_umask()


def atomic_write_text(path, text: str) -> Path:
    """``Path(path).write_text(text)`` (UTF-8), atomically."""
    return atomic_write(path, lambda f: f.write(text), binary=False)


def atomic_save(obj, path) -> Path:
    """``torch.save(obj, path)``, atomically."""
    import torch

    return atomic_write(path, lambda f: torch.save(obj, f))


_RUN_DIRS = contextvars.ContextVar("spotref_run_dirs", default=None)  # the list tidy_run_dirs keeps


TORCH_HEADS = (b"PK\x03\x04", b"\x80")  # torch.save's zip archive, and its older pickle


def not_saved_by_torch(path) -> str | None:
    """Why ``path`` cannot be a file ``torch.save`` wrote, read from its first bytes ("it is
    empty", "it begins with b'{"format'", a zip archive without torch's data.pkl), or None when it
    may be one. Readers name this first: ``torch.load``'s own errors on such a file speak of
    ``weights_only`` and unpickling, as if the file were a checkpoint it had declined to run."""
    try:
        with open(path, "rb") as f:
            head = f.read(16)
    except OSError:
        return None  # torch.load names the missing or unreadable file
    if not head:
        return "it is empty"
    if not head.startswith(TORCH_HEADS):
        return f"it is not a file torch.save writes (it begins with {head!r})"
    if head.startswith(TORCH_HEADS[0]):
        try:
            with zipfile.ZipFile(path) as z:
                if not any(n.endswith("data.pkl") for n in z.namelist()):
                    return "it is a zip archive, not one torch.save writes (no data.pkl)"
        except (zipfile.BadZipFile, OSError):
            return None  # a truncated archive: torch.load says so
    return None


def run_dir(tool: str, root=RUNS) -> Path:
    """A new directory ``root/TOOL-YYYYmmdd-HHMMSS[-k]`` for one run's outputs (created; inside
    ``tidy_run_dirs`` removed again if the run leaves it empty)."""
    stamp = time.strftime("%Y%m%d-%H%M%S")
    made = _RUN_DIRS.get()
    if made is not None and not Path(root).exists():
        made.append(Path(root))  # removed too, when the run leaves it empty
    for k in range(1000):
        d = Path(root, f"{tool}-{stamp}" + (f"-{k}" if k else ""))
        try:
            d.mkdir(parents=True)
        except FileExistsError:
            continue
        if made is not None:
            made.append(d)
        return d
    raise RuntimeError(f"cannot create a run directory under {root}")


@contextlib.contextmanager
def tidy_run_dirs():
    """The run directories ``run_dir`` makes inside the block (and a ``runs/`` it made for them)
    are removed when the block ends and they are still empty: a run refused after its directory
    was named, interrupted or failed before writing anything leaves no empty ``runs/TOOL-TIME/``.
    A directory holding anything is kept."""
    made = []
    token = _RUN_DIRS.set(made)
    try:
        yield
    finally:
        _RUN_DIRS.reset(token)
        for d in reversed(made):  # the run directories, then their root
            with contextlib.suppress(OSError):
                d.rmdir()  # only an empty directory is removed

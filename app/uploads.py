"""Files uploaded in the UI, kept on disk so that they become model specs like any path.

Uploads used to go to a shared, predictable ``/tmp/schedx-uploads/<hash>-<name>``, written through
whatever was there (a symlink another user planted), and were never deleted. Now:

- they live in a private folder of this user and this UI process: ``uploads/<pid>-<random>``
  (0700, made by ``mkdtemp``) under ``$XDG_RUNTIME_DIR/schedx`` or the user's cache folder
  (``~/.cache/schedx``), each checked to be a real folder this user owns that nobody else may
  enter; a private folder in the temp dir when neither can be used;
- a file is created relative to that folder's descriptor with ``O_CREAT | O_EXCL | O_NOFOLLOW``
  (mode 0600) under a name made of its content hash and a sanitised file name, so nothing is
  written through a link or over another file;
- an upload is at most :data:`MAX_UPLOAD_BYTES`; the folder keeps at most
  :data:`MAX_FOLDER_BYTES` (oldest files go first) and files younger than :data:`MAX_AGE_S`;
- the folder is removed when the UI process ends (``atexit``), and folders left by UI processes
  that are gone (killed) are removed the next time one starts. Streamlit has no public hook for
  a browser session's end: the process, not the tab, owns the files.
"""

from __future__ import annotations

import atexit
import hashlib
import os
import re
import shutil
import stat
import tempfile
import threading
import time
from pathlib import Path

from explorer.errors import ModelLoadError
from explorer.processes import process_alive

MAX_UPLOAD_BYTES = 1 << 30  # 1 GiB: a model file bigger than that carries its weights apart
MAX_FOLDER_BYTES = 4 << 30
MAX_AGE_S = 24 * 3600.0

_lock = threading.Lock()
_folder: Path | None = None


class UploadError(ModelLoadError):
    """An upload that cannot be kept (too large, no private folder to keep it in)."""


def _private(path: Path) -> bool:
    """A real folder (not a link) this user owns, that nobody else may enter."""
    try:
        info = os.lstat(path)
    except OSError:
        return False
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o077


def _bases() -> list[Path]:
    found = []
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime and os.path.isdir(runtime):
        found.append(Path(runtime) / "schedx")
    found.append(Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "schedx")
    return found


def _make_base(base: Path) -> Path | None:
    """``base/uploads``, created 0700 if missing, or None when it is not private (see :func:`_private`)."""
    try:
        base.mkdir(parents=True, exist_ok=True, mode=0o700)
        uploads = base / "uploads"
        uploads.mkdir(exist_ok=True, mode=0o700)
    except OSError:
        return None
    return uploads if _private(uploads) else None


def _sweep_dead(uploads: Path) -> None:
    """Remove folders of UI processes that are gone (``<pid>-<random>``)."""
    for child in uploads.iterdir():
        pid = child.name.split("-", 1)[0]
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        if not process_alive(int(pid)):
            shutil.rmtree(child, ignore_errors=True)


def upload_folder() -> Path:
    """This process's private upload folder (created on first use, removed at exit)."""
    global _folder
    with _lock:
        if _folder is not None and _private(_folder):
            return _folder
        for base in _bases():
            uploads = _make_base(base)
            if uploads is not None:
                _sweep_dead(uploads)
                folder = Path(tempfile.mkdtemp(prefix=f"{os.getpid()}-", dir=uploads))
                break
        else:  # no usable home or runtime folder: a private one in the temp dir (mkdtemp: random, 0700)
            folder = Path(tempfile.mkdtemp(prefix=f"schedx-uploads-{os.getuid()}-"))
        _folder = folder
        atexit.register(shutil.rmtree, folder, True)
        return folder


def _safe_name(filename: str) -> str:
    name = Path(str(filename).replace("\\", "/")).name
    name = re.sub(r"[^A-Za-z0-9._-]", "_", name).lstrip(".") or "upload"
    stem, dot, ext = name.rpartition(".")
    return (stem[:60] + dot + ext[:10]) if dot else name[:70]


def _trim(folder: Path, keep: str) -> None:
    """Drop files older than :data:`MAX_AGE_S`, then the oldest while the folder holds more than
    :data:`MAX_FOLDER_BYTES` (never ``keep``, the file just saved)."""
    now, files = time.time(), []
    for entry in os.scandir(folder):
        if not entry.is_file(follow_symlinks=False):
            continue
        info = entry.stat(follow_symlinks=False)
        if entry.name != keep and now - info.st_mtime > MAX_AGE_S:
            os.unlink(entry.path)
        else:
            files.append((info.st_mtime, info.st_size, entry.name))
    total = sum(size for _, size, _ in files)
    for _, size, name in sorted(files):
        if total <= MAX_FOLDER_BYTES:
            break
        if name != keep:
            os.unlink(folder / name)
            total -= size


def save_upload(data: bytes, filename: str) -> str:
    """Keep ``data`` (an uploaded file named ``filename``) in this process's private upload folder;
    returns its path. The same content under the same name is kept once."""
    if len(data) > MAX_UPLOAD_BYTES:
        raise UploadError(f"{filename} is {len(data) / 2**20:.0f} MB; uploads are at most "
                          f"{MAX_UPLOAD_BYTES >> 20} MB (give a path on this machine instead)")
    folder = upload_folder()
    name = f"{hashlib.sha256(data).hexdigest()[:16]}-{_safe_name(filename)}"
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
        except FileExistsError:
            info = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
            if not stat.S_ISREG(info.st_mode) or info.st_size != len(data):
                raise UploadError(f"cannot keep the upload: {folder / name} is not the file schedx wrote") from None
            os.utime(name, dir_fd=dir_fd)  # just used: the last to be trimmed
        else:
            try:
                with os.fdopen(fd, "wb") as f:
                    f.write(data)
            except BaseException:
                os.unlink(name, dir_fd=dir_fd)
                raise
    finally:
        os.close(dir_fd)
    _trim(folder, name)
    return str(folder / name)


def display_name(spec: str) -> str:
    """What to call a model spec on a page: an upload by the file name the user chose (not its
    private path and content hash), another path by its file name, anything else as it is."""
    path = Path(spec)
    if _folder is not None and path.parent == _folder:
        return path.name.split("-", 1)[-1]
    return path.name if ("/" in spec and path.suffix) else spec


__all__ = ["MAX_AGE_S", "MAX_FOLDER_BYTES", "MAX_UPLOAD_BYTES", "UploadError", "display_name", "save_upload",
           "upload_folder"]

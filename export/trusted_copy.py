"""A signed bundle checked and run from a private copy: the bytes checked are the bytes used.

``schedx run DIR --trust KEY.pub`` used to check the signature in ``DIR`` and then read
``manifest.json`` and run ``run.py`` from ``DIR`` again: whoever could write ``DIR`` could swap
``run.py`` (and its hash in the manifest) between the check and the run. Here the manifest, its
signature and every file the manifest lists are copied, each read once through a descriptor
opened without following links, into a fresh folder only this user can open (mode 0700); the
signature and the hashes are checked on the copy, and everything afterwards (the manifest read,
the child that runs ``run.py``, ONNX Runtime's inputs) uses the copy alone. A file in ``DIR`` that
the manifest does not list is refused, as ``python run.py --trust`` refuses it. The copy is removed when the
``with`` block ends (and, when the process is killed, by the next command's sweep of dead
processes' folders).
"""

from __future__ import annotations

import json
import os
import shutil
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from explorer.temp_dirs import private_temp_dir
from export import verify_bundle
from export.errors import BundleError

PREFIX = "schedx-trusted-"


def _copy_file(source: Path, target: Path) -> None:
    """Copy one plain file through one descriptor (no link followed, no second open)."""
    try:
        fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise BundleError(f"{source.name} is missing from {source.parent}; the bundle cannot run without it") from None
    except OSError as err:
        raise BundleError(f"refused: {source} cannot be opened as a plain file ({err.strerror}). "
                          f"Nothing was loaded") from None
    with os.fdopen(fd, "rb") as src:
        if not stat.S_ISREG(os.fstat(src.fileno()).st_mode):
            raise BundleError(f"refused: {source.name} in {source.parent} is not a plain file. Nothing was loaded")
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        with os.fdopen(os.open(target, flags, 0o600), "wb") as dst:
            shutil.copyfileobj(src, dst, 1 << 20)


@contextmanager
def trusted_copy(folder: str | os.PathLike, trust: str | os.PathLike) -> Iterator[Path]:
    """A private copy of the bundle ``folder`` whose signature verifies with the public key
    ``trust`` and whose files match the signed manifest; refused (:class:`BundleError`) otherwise."""
    folder = Path(folder).expanduser().resolve()
    if not folder.is_dir():
        raise BundleError(f"{folder} is not a folder: give the folder `schedx export -o DIR` wrote")
    with private_temp_dir(PREFIX) as made:
        copy = Path(made)
        _copy_file(folder / verify_bundle.MANIFEST, copy / verify_bundle.MANIFEST)
        if (folder / verify_bundle.SIGNATURE).exists() or (folder / verify_bundle.SIGNATURE).is_symlink():
            _copy_file(folder / verify_bundle.SIGNATURE, copy / verify_bundle.SIGNATURE)
        data = (copy / verify_bundle.MANIFEST).read_bytes()
        try:
            verify_bundle.check_signature(copy, data, trust)  # before a byte of the manifest is believed
            files = json.loads(data).get("files")
        except verify_bundle.BundleCheckError as err:
            raise BundleError(str(err).replace(str(copy), str(folder))) from None
        except (ValueError, AttributeError) as err:
            raise BundleError(f"{folder / verify_bundle.MANIFEST} is not a schedx bundle manifest ({err})") from None
        files = files if isinstance(files, dict) else {}
        for name in files:
            if Path(str(name)).name != name or name in (verify_bundle.MANIFEST, verify_bundle.SIGNATURE):
                raise BundleError(f"{folder / verify_bundle.MANIFEST} lists a file outside the bundle: {name!r}")
            _copy_file(folder / name, copy / name)
        try:
            verify_bundle.check_nothing_unlisted(folder, files)  # as `python run.py --trust` in the folder would
            verify_bundle.check_bundle(copy, trust=trust)  # the hashes, on the copy's bytes
        except verify_bundle.BundleCheckError as err:
            raise BundleError(str(err).replace(str(copy), str(folder))) from None
        yield copy


__all__ = ["PREFIX", "trusted_copy"]

"""Where a bundle may be written, and how a new bundle takes the place of an earlier one.

The contract (what an export may do to the folder ``-o DIR`` names):

- an absent or empty folder is the bundle's;
- a folder holding a schedx bundle (``manifest.json`` whose ``format`` is ``schedx-bundle``) is
  replaced, but only the files that manifest lists with their recorded sha256 (and the manifest
  and its signature) are the bundle's: **every other file and folder in it is kept**, and a listed
  file the user changed since (a README with notes) is refused, never overwritten;
- any other non-empty folder is refused before anything is built, unless the caller forces it
  (``schedx export --force``): then the bundle is written beside the files already there, which
  are kept;
- a file of the user's that has the name of a bundle file (``lib.so``, ``run.py``, ...) is
  refused even when forced: an export never writes over a file it did not write.

The new bundle is written and verified in a hidden sibling (``staging_folder``); ``publish`` links
the user's files into it (hard links: no copy, no second chance to lose them) and swaps the two
folders with two renames, so a kill at any moment leaves the earlier folder or the new one, each
whole and each with the user's files. A folder left aside by a killed swap is put back (when the
destination is missing) or removed (when the new one is in place) by the next export.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import shutil
from pathlib import Path

from export import verify_bundle
from export.bundle import ROLES
from export.errors import BundleError

MANIFEST, SIGNATURE = verify_bundle.MANIFEST, verify_bundle.SIGNATURE
_STAGING, _ASIDE = ".partial-", ".replaced-"


def bundle_names() -> tuple[str, ...]:
    """Names (glob patterns) an export may write, a user's file with one of them is never
    overwritten: every bundle's files, and those each registered target kind's bundle carries
    (:attr:`explorer.target.Target.bundle_files`: a CUDA bundle's ``kernels.cu``, ...)."""
    from explorer.target.kinds import target_kinds

    return (*ROLES, MANIFEST, SIGNATURE, *(p for k in target_kinds() for p in k.target_class.bundle_files))


def _is_bundle_name(name: str) -> bool:
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in bundle_names())


def bundle_owned(folder: Path) -> set[str]:
    """The names in ``folder`` that belong to an earlier schedx bundle (and may be replaced).

    Raises :class:`BundleError` when ``folder`` holds a ``manifest.json`` that is not a schedx
    bundle's, or a listed file that changed since the export (the user's edits)."""
    manifest_path = folder / MANIFEST
    if manifest_path.is_symlink() or not manifest_path.is_file():
        return set()
    try:
        manifest = json.loads(manifest_path.read_bytes())
    except (OSError, ValueError) as err:
        raise BundleError(f"{manifest_path} is not a schedx bundle's manifest (not readable JSON: {err}); "
                          f"nothing was written. Choose an empty or new folder") from None
    if not isinstance(manifest, dict) or manifest.get("format") != verify_bundle.FORMAT:
        raise BundleError(f"{folder} holds a manifest.json that is not a schedx bundle's; nothing was written. "
                          f"Choose an empty or new folder (an export never replaces another program's files)")
    owned = {MANIFEST, SIGNATURE}
    files = manifest.get("files") if isinstance(manifest.get("files"), dict) else {}
    for name, entry in files.items():
        path = folder / str(name)
        if Path(str(name)).name != name or not path.exists() or path.is_symlink() or not path.is_file():
            continue  # not a plain file of this folder: nothing of the bundle's to replace
        if not isinstance(entry, dict) or verify_bundle.sha256_file(path) != entry.get("sha256"):
            raise BundleError(f"{path} changed since the bundle was exported (your edits?); nothing was written. "
                              f"Move it out of {folder} to keep it, or delete it, then export again")
        owned.add(name)
    return owned


def _user_entries(folder: Path, owned: set[str]) -> list[str]:
    return sorted(entry.name for entry in os.scandir(folder) if entry.name not in owned)


def check_destination(folder: Path, *, force: bool = False) -> None:
    """Refuse, before anything is built, a destination an export may not write (see the module
    docstring): a file, a non-empty folder that is not a schedx bundle (unless ``force``), a
    folder with a file of the user's named like a bundle file."""
    if folder.is_symlink() and not folder.is_dir():
        raise BundleError(f"{folder} is a link to nothing; give a folder for the bundle")
    if folder.exists() and not folder.is_dir():
        raise BundleError(f"{folder} is a file; give a folder for the bundle")
    if not folder.is_dir():
        return
    owned = bundle_owned(folder)
    users = _user_entries(folder, owned)
    clash = [n for n in users if _is_bundle_name(n)]
    if clash:
        raise BundleError(f"{', '.join(clash)} in {folder} {'is' if len(clash) == 1 else 'are'} not a file of a schedx "
                          f"bundle, and an export would write {'it' if len(clash) == 1 else 'them'}; nothing was "
                          f"written. Move {'it' if len(clash) == 1 else 'them'} away or choose another folder")
    if users and not owned and not force:
        shown = ", ".join(users[:3]) + (f" and {len(users) - 3} more" if len(users) > 3 else "")
        raise BundleError(f"{folder} is not empty ({shown}) and holds no schedx bundle; nothing was written. Choose "
                          f"an empty or new folder, or pass --force to write the bundle beside these files "
                          f"(none of them is changed or deleted)")


def staging_folder(folder: Path, *, force: bool = False, attempt: str = "") -> Path:
    """Where an export writes and verifies its bundle before :func:`publish` puts it at ``folder``
    (a hidden sibling, so the move is a rename on the same file system). Leftovers of exports that
    were killed (their process gone) are cleared first: a staging folder is removed; a folder set
    aside by a swap is put back where the destination is missing, else removed. ``attempt`` names a
    second folder of the same export, beside its first (kept: nothing is cleared)."""
    check_destination(folder, force=force)
    if attempt:
        staging = folder.parent / f".{folder.name}{_STAGING}{attempt}-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        return staging
    folder.parent.mkdir(parents=True, exist_ok=True)
    for old in sorted(folder.parent.glob(f".{folder.name}{_ASIDE}*")) + sorted(
            folder.parent.glob(f".{folder.name}{_STAGING}*")):
        if _alive(old):
            continue
        if _ASIDE in old.name and not folder.exists():
            os.rename(old, folder)  # a swap killed between its two renames: the earlier folder comes back
        else:
            shutil.rmtree(old, ignore_errors=True)
    staging = folder.parent / f".{folder.name}{_STAGING}{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    return staging


def _alive(leftover: Path) -> bool:
    from explorer.processes import process_alive

    pid = leftover.name.rsplit("-", 1)[-1]
    return pid.isdigit() and int(pid) != os.getpid() and process_alive(int(pid))


def _link_tree(source: Path, target: Path) -> None:
    """``source`` (a user's file, link or folder) at ``target``, sharing the data (hard links; a
    copy where the file system has none)."""
    if source.is_symlink():
        os.symlink(os.readlink(source), target)
    elif source.is_dir():
        shutil.copytree(source, target, symlinks=True, copy_function=_link_or_copy)
    else:
        _link_or_copy(str(source), str(target))


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError as err:
        if err.errno not in (errno.EXDEV, errno.EPERM, errno.EMLINK, errno.ENOTSUP, errno.EACCES):
            raise
        shutil.copy2(source, target, follow_symlinks=False)


def publish(staging: Path, folder: Path, *, force: bool = False) -> None:
    """Put the finished bundle ``staging`` at ``folder``: the user's files in ``folder`` (all but
    the earlier bundle's own) are linked into ``staging`` first, then two renames swap the folders,
    so a process killed at any moment leaves the earlier folder or the new one, whole."""
    check_destination(folder, force=force)
    aside = None
    if folder.exists():
        for name in _user_entries(folder, bundle_owned(folder)):
            _link_tree(folder / name, staging / name)
        aside = folder.parent / f".{folder.name}{_ASIDE}{os.getpid()}"
        os.rename(folder, aside)
    os.rename(staging, folder)
    if aside is not None:
        shutil.rmtree(aside, ignore_errors=True)


__all__ = ["bundle_names", "bundle_owned", "check_destination", "publish", "staging_folder"]

"""A bundle's files checked before anything is loaded: the manifest read once, every file it
lists present with its recorded sha256, and with ``--trust`` its ed25519 signature verified.
Part of a bundle's ``run.py`` (:mod:`export.runner`): standard library only."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

MANIFEST = "manifest.json"
SIGNATURE = "manifest.sig"  # raw 64-byte ed25519 signature of manifest.json's bytes
FORMAT = "schedx-bundle"
FORMAT_VERSION = 1


class BundleCheckError(Exception):
    """The bundle cannot be trusted or used: a file is missing, changed, or the manifest is bad."""


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def check_signature(folder: str | os.PathLike, manifest_bytes: bytes, public_key: str | os.PathLike) -> None:
    """Refuse (:class:`BundleCheckError`) unless ``manifest.sig`` in ``folder`` is an ed25519
    signature of ``manifest_bytes`` by the private key of ``public_key`` (a PEM file)."""
    try:
        from cryptography.exceptions import InvalidSignature
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PublicKey
        from cryptography.hazmat.primitives.serialization import load_pem_public_key
    except ImportError:
        raise BundleCheckError("checking a bundle's signature needs the cryptography package: "
                               "pip install cryptography") from None
    try:
        key = load_pem_public_key(Path(public_key).read_bytes())
    except (OSError, ValueError, TypeError) as err:
        raise BundleCheckError(f"cannot read the public key {public_key}: {err}") from None
    if not isinstance(key, Ed25519PublicKey):
        raise BundleCheckError(f"{public_key} is not an ed25519 public key (schedx keygen makes one)")
    sig = Path(folder) / SIGNATURE
    if sig.is_symlink() or not sig.is_file():
        raise BundleCheckError(f"refused: {folder} is not signed (no {SIGNATURE}) and --trust asks for a signature. "
                               f"Nothing was loaded")
    try:
        key.verify(sig.read_bytes(), manifest_bytes)
    except InvalidSignature:
        raise BundleCheckError(f"refused: the signature in {SIGNATURE} does not verify with {public_key}: the "
                               f"manifest changed after it was signed, or another key signed it. Nothing was "
                               f"loaded") from None


def check_bundle(folder: str | os.PathLike, *, trust: str | os.PathLike | None = None) -> dict:
    """The manifest of ``folder`` once every file it lists is present with its recorded sha256
    (and, with ``trust``, once the manifest's signature verifies with that public key)."""
    folder = Path(folder)
    path = folder / MANIFEST
    if not folder.is_dir():
        raise BundleCheckError(f"{folder} is not a folder: give the folder `schedx export -o DIR` wrote")
    if path.is_symlink():
        raise BundleCheckError(f"refused: {MANIFEST} in {folder} is a link, not a plain file. Nothing was loaded")
    if not path.is_file():
        raise BundleCheckError(f"{folder} has no {MANIFEST}: not a schedx bundle")
    try:
        data = path.read_bytes()  # read once: the bytes checked are the bytes used
        if trust is not None:
            check_signature(folder, data, trust)
        manifest = json.loads(data)
    except (OSError, ValueError) as err:
        raise BundleCheckError(f"{path} is not readable JSON ({err})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        raise BundleCheckError(f"{path} is not a schedx bundle manifest")
    if int(manifest.get("format_version", 0)) > FORMAT_VERSION:
        raise BundleCheckError(f"{path} was written by a newer schedx (format {manifest.get('format_version')})")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise BundleCheckError(f"{path} lists no files")
    if file_with_role(manifest, "library") is None:
        raise BundleCheckError(f"{path} lists no library file")
    for name, entry in files.items():
        if Path(name).name != name:
            raise BundleCheckError(f"{path} lists a file outside the bundle: {name!r}")
        where = folder / name
        role = entry.get("role", "file")
        if where.is_symlink() or (where.exists() and not where.is_file()):
            raise BundleCheckError(f"refused: {name} in {folder} is a link or a special file, not a plain file; "
                                   f"a bundle holds only its own files. Nothing was loaded")
        if not where.is_file():
            what = "parameters file" if role == "params" else f"{role} file"
            raise BundleCheckError(f"the {what} {name} is missing from {folder}; the bundle cannot run without it "
                                   f"(export it again)")
        actual = sha256_file(where)
        if actual != entry.get("sha256"):
            raise BundleCheckError(f"refused: {name} does not match the sha256 in {MANIFEST} "
                                   f"({actual[:12]}... vs {str(entry.get('sha256'))[:12]}...): it changed after export. "
                                   f"Nothing was loaded")
    if trust is not None:  # a signed bundle is exactly what its manifest lists: nothing more, nothing special
        check_nothing_unlisted(folder, files)
    return manifest


def check_nothing_unlisted(folder: Path, files: dict) -> None:
    """Refuse a signed bundle ``folder`` holding anything its manifest does not list."""
    listed = set(files) | {MANIFEST, SIGNATURE}
    extra = sorted(entry.name for entry in os.scandir(folder) if entry.name not in listed)
    if extra:
        raise BundleCheckError(f"refused: {', '.join(extra[:5])} in {folder} {'is' if len(extra) == 1 else 'are'} "
                               f"not in the signed manifest; a signed bundle holds only the files it lists "
                               f"(remove {'it' if len(extra) == 1 else 'them'}, or export again). Nothing was loaded")


def file_with_role(manifest: dict, role: str) -> str | None:
    return next((n for n, e in manifest["files"].items() if e.get("role") == role), None)


__all__ = ["FORMAT", "FORMAT_VERSION", "MANIFEST", "SIGNATURE", "BundleCheckError", "check_bundle",
           "check_nothing_unlisted", "check_signature", "file_with_role", "sha256_file"]

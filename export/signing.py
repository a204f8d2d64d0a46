"""Signed bundles: an ed25519 key pair, a detached signature of the manifest, and its check.

The manifest holds every file's sha256, so a signature of the manifest's bytes covers the whole
bundle: a swapped library needs a rewritten manifest, and a rewritten manifest no longer matches
the signature. ``manifest.sig`` holds the raw 64-byte signature, so OpenSSL checks it too::

    openssl genpkey -algorithm ed25519 -out schedx.key            # or: schedx keygen schedx.key
    openssl pkey -in schedx.key -pubout -out schedx.key.pub
    openssl pkeyutl -verify -pubin -inkey schedx.key.pub -rawin -in manifest.json -sigfile manifest.sig

Keys are PEM files (PKCS#8 private key, unencrypted; SubjectPublicKeyInfo public key), the format
OpenSSL writes. Verification lives in :mod:`export.verify_bundle` (it runs inside a bundle's
``run.py``, where schedx is absent).
"""

from __future__ import annotations

import os
from pathlib import Path

from export import verify_bundle
from export.errors import BundleError


def _crypto():
    try:
        from cryptography.hazmat.primitives import serialization
        from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
    except ImportError:
        raise BundleError("signing bundles needs the cryptography package: pip install cryptography") from None
    return serialization, Ed25519PrivateKey


def keygen(path: str | os.PathLike) -> tuple[Path, Path]:
    """A new ed25519 key pair: the private key at ``path`` (mode 0600, never overwritten) and the
    public key at ``path.pub``. Returns both paths."""
    serialization, Ed25519PrivateKey = _crypto()
    private = Path(path)
    if not private.name or private.is_dir():
        raise BundleError(f"give a file name for the private key, not {str(path)!r} (e.g. schedx keygen team.key)")
    public = private.with_name(private.name + ".pub")
    key = Ed25519PrivateKey.generate()
    pem = key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8,
                            serialization.NoEncryption())
    pub = key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    for where in (private, public):
        if where.exists() or where.is_symlink():
            raise BundleError(f"{where} exists already; schedx never overwrites a key (choose another name)")
    try:
        fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(pem)
        fd = os.open(public, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "wb") as f:
            f.write(pub)
    except OSError as err:
        raise BundleError(f"cannot write the key pair at {private}: {err.strerror or err}") from None
    return private, public


def private_key_of(path: str | os.PathLike):
    """The ed25519 private key in the PEM file at ``path`` (:class:`BundleError` when it is not one)."""
    serialization, Ed25519PrivateKey = _crypto()
    try:
        key = serialization.load_pem_private_key(Path(path).read_bytes(), password=None)
    except (OSError, ValueError, TypeError) as err:
        raise BundleError(f"cannot read the private key {path}: {getattr(err, 'strerror', None) or err} "
                          f"(an unencrypted PEM ed25519 key: schedx keygen makes one)") from None
    if not isinstance(key, Ed25519PrivateKey):
        raise BundleError(f"{path} is not an ed25519 private key (schedx keygen makes one)")
    return key


def sign_bundle(folder: str | os.PathLike, private_key: str | os.PathLike) -> Path:
    """Sign the bundle in ``folder`` (its files are checked against the manifest first): writes
    ``manifest.sig``, the detached signature of ``manifest.json``'s bytes. Returns its path."""
    folder = Path(folder)
    key = private_key_of(private_key)
    try:
        verify_bundle.check_bundle(folder)  # sign only what is whole
    except verify_bundle.BundleCheckError as err:
        raise BundleError(f"not signed: {err}") from None
    data = (folder / verify_bundle.MANIFEST).read_bytes()
    sig = folder / verify_bundle.SIGNATURE
    if sig.is_symlink():
        sig.unlink()
    sig.write_bytes(key.sign(data))
    return sig


def check_signed(folder: str | os.PathLike, public_key: str | os.PathLike) -> dict:
    """The manifest, once its signature verifies with ``public_key`` and every file matches it
    (:class:`BundleError` otherwise)."""
    try:
        return verify_bundle.check_bundle(folder, trust=public_key)
    except verify_bundle.BundleCheckError as err:
        raise BundleError(str(err)) from None


__all__ = ["check_signed", "keygen", "private_key_of", "sign_bundle"]

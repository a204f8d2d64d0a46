"""Signed bundles: the manifest's hashes catch accidents only (a swapped library with a rewritten
manifest loads); an ed25519 signature of the manifest, checked against a trusted public key,
refuses it. The bundle's run.py keeps working without the cryptography package when no
signature is asked for."""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from app.cli import cli
from tests.inotify_watch import after_reads, swap_run_py
from export import export_workload
from export.bundle import read_manifest
from export.errors import BundleError
from export.signing import keygen, sign_bundle

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(scope="module")
def bundles(tmp_path_factory):
    root = tmp_path_factory.mktemp("signing")
    export_workload("matmul:M=8,N=8,K=8", "cpu", root / "good", verify=False, layers=False)
    export_workload("matmul:M=8,N=8,K=8,dtype=float64", "cpu", root / "other", verify=False, layers=False)
    private, public = keygen(root / "team.key")
    return root, private, public


def _fresh(bundles, tmp_path, name="b") -> Path:
    root, private, _ = bundles
    folder = tmp_path / name
    shutil.copytree(root / "good", folder)
    sign_bundle(folder, private)
    return folder


def _swap_library_and_rewrite_manifest(folder: Path, other: Path) -> None:
    """What an attacker who can write the bundle does: another library, and a manifest that
    agrees with it."""
    shutil.copyfile(other / "lib.so", folder / "lib.so")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["lib.so"]["sha256"] = hashlib.sha256((folder / "lib.so").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))


def test_keys_are_private_and_never_overwritten(bundles):
    root, private, public = bundles
    assert os.stat(private).st_mode & 0o777 == 0o600 and public.read_text().startswith("-----BEGIN PUBLIC KEY")
    with pytest.raises(BundleError, match="exists already"):
        keygen(private)
    for bad in ("", ".", root):
        with pytest.raises(BundleError, match="give a file name"):
            keygen(bad)


def test_a_swapped_library_with_a_rewritten_manifest_is_refused_only_with_trust(bundles, tmp_path):
    root, _, public = bundles
    folder = _fresh(bundles, tmp_path)
    assert read_manifest(folder, trust=public)["files"]["lib.so"]
    _swap_library_and_rewrite_manifest(folder, root / "other")
    read_manifest(folder)  # the hashes agree: the manifest alone catches accidents, not this
    with pytest.raises(BundleError, match="does not verify"):
        read_manifest(folder, trust=public)


def test_unsigned_bundles_and_other_keys_are_refused_with_trust(bundles, tmp_path):
    root, _, public = bundles
    with pytest.raises(BundleError, match="not signed"):
        read_manifest(root / "good", trust=public)
    _, other_public = keygen(tmp_path / "other.key")
    folder = _fresh(bundles, tmp_path)
    with pytest.raises(BundleError, match="another key"):
        read_manifest(folder, trust=other_public)
    with pytest.raises(BundleError, match="cannot read the public key"):
        read_manifest(folder, trust=tmp_path / "missing.pub")
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ec

    ec_pub = tmp_path / "ec.pub"
    ec_pub.write_bytes(ec.generate_private_key(ec.SECP256R1()).public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo))
    with pytest.raises(BundleError, match="not an ed25519"):
        read_manifest(folder, trust=ec_pub)


def test_openssl_checks_the_same_signature(bundles, tmp_path):
    if shutil.which("openssl") is None:
        pytest.skip("no openssl here")
    folder = _fresh(bundles, tmp_path)
    out = subprocess.run(["openssl", "pkeyutl", "-verify", "-pubin", "-inkey", str(bundles[2]), "-rawin", "-in",
                          str(folder / "manifest.json"), "-sigfile", str(folder / "manifest.sig")],
                         capture_output=True, text=True)
    assert out.returncode == 0 and "Success" in out.stdout, out.stdout + out.stderr


def _run_py(folder: Path, *args: str, without_crypto: bool = False) -> subprocess.CompletedProcess:
    """The bundle's own run.py in a fresh Python (optionally one where cryptography is missing)."""
    prelude = "import sys; sys.modules['cryptography'] = None; " if without_crypto else "import sys; "
    code = prelude + ("import runpy; sys.argv = ['run.py', *sys.argv[1:]]; "
                      "runpy.run_path('run.py', run_name='__main__')")
    return subprocess.run([sys.executable, "-c", code, *args, "--without-torch"], cwd=folder, capture_output=True,
                          text=True, timeout=300)


def test_run_py_checks_the_signature_and_needs_cryptography_only_then(bundles, tmp_path):
    root, _, public = bundles
    folder = _fresh(bundles, tmp_path)
    plain = _run_py(folder, without_crypto=True)
    assert plain.returncode == 0 and "matches" in plain.stdout, plain.stdout + plain.stderr
    trusted = _run_py(folder, "--trust", str(public))
    assert trusted.returncode == 0, trusted.stdout + trusted.stderr
    missing = _run_py(folder, "--trust", str(public), without_crypto=True)
    assert missing.returncode == 2 and "pip install cryptography" in missing.stderr
    _swap_library_and_rewrite_manifest(folder, root / "other")
    refused = _run_py(folder, "--trust", str(public))
    assert refused.returncode == 2 and "does not verify" in refused.stderr and "Nothing was loaded" in refused.stderr


def test_cli_keygen_export_sign_and_run_trust(tmp_path, bundles):
    root = bundles[0]
    runner = CliRunner()
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        made = runner.invoke(cli, ["keygen", "k.pem"], obj={})
        assert made.exit_code == 0 and Path("k.pem.pub").is_file(), made.output
        out = runner.invoke(cli, ["export", "matmul:M=8,N=8,K=8", "-o", "signed", "--no-db", "--no-verify",
                                  "--sign", "k.pem"], obj={})
        assert out.exit_code == 0 and Path("signed/manifest.sig").is_file(), out.output
        ok = runner.invoke(cli, ["run", "signed", "--trust", "k.pem.pub", "--runs", "2", "--no-baselines"], obj={})
        assert ok.exit_code == 0, ok.output
        _swap_library_and_rewrite_manifest(Path("signed"), root / "other")
        bad = runner.invoke(cli, ["run", "signed", "--trust", "k.pem.pub", "--runs", "2"], obj={})
        assert bad.exit_code == 1 and bad.output.strip().splitlines()[-1].startswith("Error: refused: the signature")
        nokey = runner.invoke(cli, ["export", "matmul:M=8,N=8,K=8", "-o", "x", "--sign", "nope.pem"], obj={})
        assert nokey.exit_code == 1 and "cannot read the private key" in nokey.output and not Path("x").exists()
    finally:
        os.chdir(here)


@pytest.mark.parametrize("extra", ["extra.py", "fifo", "folder"])
def test_a_signed_bundle_with_anything_more_is_refused_with_trust(bundles, tmp_path, extra):
    """Issue 30, probe 6: a signed bundle with an extra file (extra.py) or a FIFO ran with --trust."""
    _, _, public = bundles
    folder = _fresh(bundles, tmp_path)
    if extra == "fifo":
        os.mkfifo(folder / extra)
    elif extra == "folder":
        (folder / extra).mkdir()
    else:
        (folder / extra).write_text("import os\n")
    read_manifest(folder)  # without --trust the hashes of the listed files are what is checked
    with pytest.raises(BundleError, match=f"refused: {extra} in .* not in the signed manifest"):
        read_manifest(folder, trust=public)
    result = CliRunner().invoke(cli, ["run", str(folder), "--trust", str(public), "--runs", "1"], obj={})
    assert result.exit_code == 1 and "not in the signed manifest" in result.output, result.output


def test_a_swapped_run_py_with_a_rewritten_manifest_is_named_not_a_key_error(bundles, tmp_path):
    """Issue 30, probe 7: a run.py swapped for one that prints other JSON (the manifest rewritten to
    agree) ended in "unexpected KeyError: 'load_s'"; without --trust it is refused in words."""
    folder = _fresh(bundles, tmp_path)
    (folder / "run.py").write_text("import json\nprint(json.dumps({'hello': 1}))\n")
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["files"]["run.py"]["sha256"] = hashlib.sha256((folder / "run.py").read_bytes()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
    result = CliRunner().invoke(cli, ["run", str(folder), "--runs", "1"], obj={})
    assert result.exit_code == 1 and "it is not the run.py the export wrote" in result.output, result.output
    assert "KeyError" not in result.output and "unexpected" not in result.output


def test_run_trust_uses_the_bytes_it_checked(bundles, tmp_path):
    """Issue 49, item 2: run.py and its hash in the manifest replaced right after the signature and
    the hashes were checked (inotify, no re-signing) ran the payload 4 times out of 4. The check
    and the run now read one private copy: the payload never runs, the signed bundle does."""
    import threading

    _, _, public = bundles
    folder = _fresh(bundles, tmp_path)
    marker = tmp_path / "payload-ran"
    listed = set(json.loads((folder / "manifest.json").read_text())["files"]) | {"manifest.json", "manifest.sig"}

    swapped: list[bool] = []

    def swap() -> None:
        swapped.append(True)
        swap_run_py(folder, f"open({str(marker)!r}, 'w').write('ran')\n")

    watcher = threading.Thread(target=after_reads, args=(folder, listed, swap), daemon=True)
    watcher.start()
    time.sleep(0.3)  # the watch is in place
    result = CliRunner().invoke(cli, ["run", str(folder), "--trust", str(public), "--runs", "2", "--no-baselines",
                                      "--rounds", "1"], obj={})
    watcher.join(30)
    assert swapped, "the watcher saw the check and swapped run.py"
    assert not marker.exists(), "the swapped run.py ran under --trust"
    assert result.exit_code == 0, result.output
    assert not list(Path(tempfile.gettempdir()).glob(f"schedx-trusted-pid{os.getpid()}-*")), "the private copy is gone"

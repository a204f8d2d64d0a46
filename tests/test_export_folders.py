"""Where an export may write (export/folders.py): an earlier bundle is replaced, every other file
is kept, another program's folder is refused (issue 49: an export wiped a folder holding a file
named manifest.json)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from export import verify_bundle
from export.errors import BundleError
from export.folders import check_destination, publish, staging_folder

ROOT = Path(__file__).resolve().parent.parent


def _fake_bundle(folder: Path, text: str = "lib") -> None:
    """A folder shaped like a bundle (files with their sha256 in a schedx manifest): no TVM needed."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "lib.so").write_text(text)
    (folder / "README.md").write_text(f"readme {text}")
    files = {n: {"role": "library" if n == "lib.so" else "readme", "sha256": verify_bundle.sha256_file(folder / n)}
             for n in ("lib.so", "README.md")}
    (folder / "manifest.json").write_text(json.dumps({"format": verify_bundle.FORMAT, "files": files}))


def _user_files(folder: Path) -> None:
    (folder / "results").mkdir()
    (folder / "results" / "run1.csv").write_text("a,b\n1,2\n")
    (folder / "my_notes.txt").write_text("mine")
    os.symlink("my_notes.txt", folder / "notes_link")


def _replace(folder: Path, text: str, *, force: bool = False) -> None:
    staging = staging_folder(folder, force=force)
    _fake_bundle(staging, text)
    publish(staging, folder, force=force)


def test_a_re_export_keeps_the_users_files(tmp_path):
    out = tmp_path / "bundle"
    _fake_bundle(out, "old")
    _user_files(out)
    _replace(out, "new")
    assert (out / "lib.so").read_text() == "new"
    assert (out / "results" / "run1.csv").read_text() == "a,b\n1,2\n"
    assert (out / "my_notes.txt").read_text() == "mine"
    assert os.readlink(out / "notes_link") == "my_notes.txt"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bundle"], "no staging or set-aside folder is left"


def test_a_file_the_old_manifest_does_not_list_is_never_deleted(tmp_path):
    """The new bundle has fewer files than the old one: the old one's go, nothing else does."""
    out = tmp_path / "bundle"
    _fake_bundle(out, "old")
    (out / "kernels.cu").write_text("cuda")  # a file with a bundle's name that the manifest does not list
    with pytest.raises(BundleError, match="kernels.cu .* not a file of a schedx bundle"):
        _replace(out, "new")
    assert (out / "kernels.cu").read_text() == "cuda" and (out / "lib.so").read_text() == "old"


def test_another_programs_manifest_is_refused(tmp_path):
    """The issue's case: a web app's folder with its own manifest.json."""
    out = tmp_path / "w"
    (out / "src").mkdir(parents=True)
    (out / "manifest.json").write_text('{"name": "app"}')
    (out / "src" / "main.js").write_text("x")
    (out / "NOTES.txt").write_text("n")
    for force in (False, True):
        with pytest.raises(BundleError, match="not a schedx bundle's"):
            check_destination(out, force=force)
    assert sorted(p.name for p in out.iterdir()) == ["NOTES.txt", "manifest.json", "src"]


def test_a_non_empty_folder_needs_force_and_keeps_its_files(tmp_path):
    out = tmp_path / "mine"
    out.mkdir()
    (out / "a.txt").write_text("a")
    with pytest.raises(BundleError, match="pass --force"):
        check_destination(out)
    _replace(out, "new", force=True)
    assert (out / "a.txt").read_text() == "a" and (out / "lib.so").read_text() == "new"
    _replace(out, "newer")  # now a bundle: replaced without --force, a.txt still kept
    assert (out / "a.txt").read_text() == "a" and (out / "lib.so").read_text() == "newer"


def test_a_listed_file_the_user_edited_is_refused(tmp_path):
    out = tmp_path / "bundle"
    _fake_bundle(out, "old")
    (out / "README.md").write_text("my notes on this bundle")
    with pytest.raises(BundleError, match="README.md changed since the bundle was exported"):
        check_destination(out)
    assert (out / "README.md").read_text() == "my notes on this bundle"


def test_a_swap_killed_between_its_renames_is_undone_by_the_next_export(tmp_path):
    """The earlier folder set aside by a process that died is put back; the new one's staging goes."""
    out = tmp_path / "bundle"
    _fake_bundle(out, "old")
    _user_files(out)
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    pid = int(dead.stdout)
    aside, staging = tmp_path / f".bundle.replaced-{pid}", tmp_path / f".bundle.partial-{pid}"
    os.rename(out, aside)
    _fake_bundle(staging, "half")
    fresh = staging_folder(out)
    assert (out / "lib.so").read_text() == "old" and (out / "my_notes.txt").read_text() == "mine"
    assert not aside.exists() and not staging.exists() and not fresh.exists()


def test_export_into_another_programs_folder_through_the_cli(tmp_path):
    """The issue's command, end to end: exit 1, one line, every file still there."""
    w = tmp_path / "w"
    (w / "src").mkdir(parents=True)
    (w / "manifest.json").write_text('{"name":"app"}')
    (w / "src" / "main.js").write_text("x")
    (w / "NOTES.txt").write_text("n")
    ran = subprocess.run([sys.executable, "-m", "app.cli", "export", "matmul:M=64,N=64,K=64", "--no-db", "-o", str(w)],
                         capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert ran.returncode == 1 and "not a schedx bundle's" in ran.stderr and "Traceback" not in ran.stderr
    assert (w / "NOTES.txt").read_text() == "n" and (w / "src" / "main.js").read_text() == "x"
    assert (w / "manifest.json").read_text() == '{"name":"app"}'


def test_a_real_re_export_keeps_the_users_files(tmp_path):
    from export.bundle import read_manifest
    from export.flow import export_workload

    out = tmp_path / "out"
    export_workload("matmul:M=8,N=8,K=8", "llvm", out, verify=False, layers=False)
    _user_files(out)
    export_workload("matmul:M=8,N=16,K=8", "llvm", out, verify=False, layers=False)
    assert read_manifest(out)["workload"]["spec"] == "matmul:M=8,N=16,K=8"
    assert (out / "results" / "run1.csv").read_text() == "a,b\n1,2\n" and (out / "my_notes.txt").read_text() == "mine"


def test_the_files_a_registered_kinds_bundle_carries_are_never_overwritten(tmp_path):
    """The protected names come from the target kinds (a CUDA bundle's ``kernels_sm_XX.cubin``; a
    new device kind's own files once it is registered), not from a list in export/folders.py."""
    from typing import ClassVar

    from explorer.target import Target, TargetKind
    from explorer.target.kinds import kind_registered

    class ToyTarget(Target):
        bundle_files: ClassVar[tuple[str, ...]] = ("toy_*.bin",)

    class ToyKind(TargetKind):
        name, target_class, words, json_kinds = "toy-device", ToyTarget, ("toydev",), ("toydev",)

    out = tmp_path / "out"
    out.mkdir()
    (out / "toy_kernels.bin").write_text("mine")
    check_destination(out, force=True)  # no kind writes it: forced, the export goes beside it
    (out / "kernels_sm_90.cubin").write_text("mine")
    with pytest.raises(BundleError, match="kernels_sm_90.cubin"):
        check_destination(out, force=True)
    (out / "kernels_sm_90.cubin").unlink()
    with kind_registered(ToyKind()), pytest.raises(BundleError, match="toy_kernels.bin"):
        check_destination(out, force=True)
    assert (out / "toy_kernels.bin").read_text() == "mine"

"""Cross-compiled bundles: an aarch64 library built here with the cross toolchain, checked as an
aarch64 ELF with the TVM runtime's entry points, never run here (the verdict says so)."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from click.testing import CliRunner

from app.cli import cli
from export import export_workload
from export.elf_check import check_elf


@pytest.fixture(scope="module")
def cross_compiler():
    if shutil.which("aarch64-linux-gnu-g++") is None:
        if os.environ.get("CI"):
            pytest.fail("aarch64-linux-gnu-g++ is missing: `make test` installs it with apt-get")
        pytest.skip("no aarch64 cross compiler (apt-get install g++-aarch64-linux-gnu)")


def test_an_aarch64_bundle_is_an_aarch64_library(cross_compiler, tmp_path):
    report = export_workload("matmul:M=32,N=32,K=32", "aarch64:cortex-a76", tmp_path / "b", layers=False)
    assert report.elf is not None and report.elf.ok, report.elf.summary()
    assert report.elf.machine == "aarch64" and "__tvm_ffi__library_bin" in report.elf.symbols
    assert report.verification.status == "skipped" and "aarch64 code" in report.verification.why
    assert report.ok and not report.verified and "not run here" in report.verdict
    manifest = json.loads((tmp_path / "b" / "manifest.json").read_text())
    assert manifest["compiler"] == "aarch64-linux-gnu-g++" and manifest["target"]["arch"] == "aarch64"
    assert manifest["verification"]["library"]["ok"]


def test_the_elf_check_refuses_a_library_for_another_machine(cross_compiler, tmp_path):
    report = export_workload("matmul:M=16,N=16,K=16", "cpu", tmp_path / "x86", layers=False, verify=False)
    wrong = check_elf(report.folder / "lib.so", "aarch64")
    assert not wrong.ok and "expected aarch64" in wrong.summary()
    (tmp_path / "junk.so").write_bytes(b"not an elf at all")
    assert "not an ELF file" in check_elf(tmp_path / "junk.so", "aarch64").summary()


def test_cli_export_for_aarch64_from_a_relative_path(cross_compiler, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(cli, ["export", "small_cnn", "--target", "aarch64", "-o", "bundle", "--no-db",
                                 "--no-layers"])
    assert r.exit_code == 0, r.output
    assert "aarch64 ELF shared library" in r.output and "verdict: built, not run here" in r.output
    assert (tmp_path / "bundle" / "lib.so").is_file()
    run = CliRunner().invoke(cli, ["run", "bundle"])
    assert run.exit_code == 1 and "cannot run here" in run.output and "aarch64" in run.output

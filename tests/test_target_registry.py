"""The target registries: a toy CPU architecture (RISC-V with its vector extension) and a toy
device kind, each registered inside a test only, and seen end to end (parsed, listed in
`schedx targets` and the help, built or refused, counted in the assembly view, asked for its
bundle's files) without a line of schedx changed for them."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import ClassVar

import pytest

from explorer.target.environment import read_cpuinfo_flags
from explorer.target import (CPU_ARCHES, CpuArch, DeviceCode, Target, TargetError, TargetKind, arch_registered,
                             intrinsics_of, kind_registered, parse_target, spec_help, target_choices,
                             targets_overview)
from explorer.target.asm import AsmSyntax

# RISC-V as LLVM writes it: `# comment`, `bnez a0, .LBB0_3`, `vfmacc.vv v14, v10, v12`
RISCV_ASM = AsmSyntax(
    "riscv64", ("#",),
    branches=(r"(b\w*|j)\s+(?:[^,\s]+,\s*)*(?P<label>\.L[\w.$]+)\s*$",),
    ends=r"(j|jr|ret)\b",
    fma=r"vfn?m(acc|add|sac|sub)\.\w+\s",
    vector=r"\bv\d+\b",
    registers=((r"\bv\d+\b", 128),),  # VLEN 128: the width LLVM assumes for +v
)
RISCV = CpuArch("riscv64", "riscv64-linux-gnu", "riscv64-linux-gnu-g++", ("riscv64", "rv64"), ("generic",), 243,
                {"v": ("v",), "d": ("d",), "f": ("f",)}, (("v", 128),), (("v", "rvv"),), "", registers=32,
                asm=RISCV_ASM, cpuinfo_field="isa", kernel_flags=("v",), offered_cpu="generic")


@pytest.fixture
def riscv():
    with arch_registered(RISCV) as arch:
        yield arch
    assert "riscv64" not in CPU_ARCHES


def _fma_kernel():
    import tvm
    from tvm import s_tir, te

    a, b, c = (te.placeholder((256,), name=n) for n in "ABC")
    d = te.compute((256,), lambda i: c[i] + a[i] * b[i], name="D")
    sch = s_tir.Schedule(te.create_prim_func([a, b, c, d]))
    outer, inner = sch.split(sch.get_loops(sch.get_sblock("D"))[0], [None, 16])
    sch.vectorize(inner)
    return tvm.IRModule({"main": sch.mod["main"]})


def test_a_toy_cpu_architecture_is_parsed_listed_built_and_counted(riscv):
    from click.testing import CliRunner

    from app.cli import cli
    from explorer.schedule.codegen import code_views

    target = parse_target("riscv64:+v")
    assert target.kind == "cpu" and target.arch == "riscv64" and target.cross and not target.runs_here
    assert target.config["mtriple"] == "riscv64-linux-gnu" and target.vector_width == 128 and target.isa == "rvv"
    assert target.asm is RISCV_ASM and "riscv64-linux-gnu-g++" in target.notes[0]
    with pytest.raises(TargetError, match="riscv64 code"):
        target.require_runnable()
    assert parse_target('{"kind": "llvm", "mtriple": "riscv64-linux-gnu", "mattr": ["+v"]}').arch == "riscv64"
    assert "riscv64[:MCPU]" in spec_help() and "riscv64:generic" in target_choices()
    assert intrinsics_of("riscv64") == ()

    cross = {c["spec"]: c for c in targets_overview()["cross"]}
    assert "generic-rv64" in cross["riscv64"]["cpus"] or cross["riscv64"]["cpus"]
    listed = CliRunner().invoke(cli, ["targets"])
    assert listed.exit_code == 0 and "riscv64 (--target riscv64[:CPU]" in listed.output

    views = code_views(_fma_kernel(), target)  # cross-compiled, nothing run
    assert "vfmacc.vv" in views.asm
    assert views.stats.fma.get(128, 0) > 0 and views.stats.vector.get(128, 0) > 0, views.stats.summary()
    assert views.hot is not None and views.hot.fma > 0

    assert read_cpuinfo_flags("processor\t: 0\nisa\t\t: v d f\n", RISCV.cpuinfo_field) == {"v", "d", "f"}


def test_an_architecture_is_gone_after_its_fixture():
    with pytest.raises(TargetError, match="unknown target"):
        parse_target("riscv64")
    assert "riscv64" not in spec_help()


@dataclass(frozen=True)
class ToyCheck:
    ok: bool = True

    def summary(self) -> str:
        return "toy code checked"

    def to_dict(self) -> dict:
        return {"ok": self.ok, "summary": self.summary()}


@dataclass(frozen=True)
class ToyTarget(Target):
    kind: ClassVar[str] = "toy"
    device: ClassVar[str] = "toy"
    default_schedule: ClassVar[str] = "the toy's own schedules"
    runnable_fix: ClassVar[str] = "run it on a toy board"

    @property
    def label(self) -> str:
        return f"toy {self.arch}"

    def why_not_here(self) -> str:
        return "this machine has no toy accelerator"

    @property
    def stand_in(self) -> str:
        return "the toy checks stand in"

    def device_code(self, lowered, executable, *, compile: bool = True) -> DeviceCode:
        return DeviceCode("the toy checks", ToyCheck(), {f"toy_{self.arch}.bin": ("toy-binary", b"\x00toy")})


class ToyKind(TargetKind):
    name = "toy"
    target_class = ToyTarget
    words = ("toy",)
    json_kinds = ("toy",)
    help = "toy, toy:tN"
    choices = ("toy:t1",)
    title = "Toy accelerators (--target toy:tN)"
    intrinsic_modules = ("toy",)

    def parse(self, text: str, head: str, arg: str, *, cores: int | None) -> Target:
        arch = arg or "t1"
        if arch not in ("t1", "t2"):
            raise TargetError(f"unknown toy {arch!r}; use t1 or t2")
        return ToyTarget(text, arch, {"kind": "toy", "arch": arch}, host={"kind": "llvm"})

    def parse_json(self, text: str, config: dict, *, cores: int | None) -> Target:
        return self.parse(text, "toy", str(config.get("arch", "")), cores=cores)

    def listing(self) -> list[dict]:
        return [{"spec": f"toy:{a}", "runs_here": False, "why_not_here": "this machine has no toy accelerator"}
                for a in ("t1", "t2")]


@pytest.fixture
def toy():
    with kind_registered(ToyKind()) as kind:
        yield kind


def test_a_toy_device_kind_is_parsed_listed_refused_and_asked_for_its_files(toy):
    from click.testing import CliRunner

    from app.cli import cli

    target = parse_target("toy:t2")
    assert isinstance(target, ToyTarget) and target.label == "toy t2"
    assert parse_target(json.dumps({"kind": "toy", "arch": "t1"})).arch == "t1"
    with pytest.raises(TargetError, match="unknown toy"):
        parse_target("toy:t9")
    assert not target.searchable and not target.cpu_rules
    with pytest.raises(TargetError, match="no toy accelerator; run it on a toy board"):
        target.require_runnable()
    assert "toy, toy:tN" in spec_help() and "toy" not in spec_help("searchable") and "toy:t1" in target_choices()
    assert intrinsics_of("toy:t1") == ("toy",) and intrinsics_of('{"kind": "toy"}') == ("toy",)

    data = targets_overview()
    assert [r["spec"] for r in data["toy"]] == ["toy:t1", "toy:t2"]
    listed = CliRunner().invoke(cli, ["targets"])
    assert listed.exit_code == 0 and "Toy accelerators" in listed.output and "toy:t1, toy:t2" in listed.output

    device = target.device_code(None, None)  # what the export writes beside the library, and its verdict
    assert device.files == {"toy_t2.bin": ("toy-binary", b"\x00toy")} and device.check.ok
    assert parse_target("cpu").device_code(None, None) is None


def test_a_kind_may_not_take_a_registered_spelling():
    class Clash(ToyKind):
        name = "clash"
        words = ("cuda",)

    with pytest.raises(ValueError, match="cuda"):
        kind_registered(Clash()).__enter__()
    with pytest.raises(TargetError, match="unknown target"):
        parse_target("toy")


def test_export_asks_the_target_for_its_device_files():
    """No branch on a kind in the export: the target's ``device_code`` names its checks and files."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "export" / "flow.py").read_text()
    assert "target.device_code(" in text
    assert "kernels.cu" not in text and "check_cuda" not in text and "has_device_code" not in text

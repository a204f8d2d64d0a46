"""A CPU build warns, one line per task, where a default rule meant for a kernel failed and a
simpler one took it, or a bf16/int8 product ran without its dot-product tile
(:mod:`explorer.schedule.defaults.fallbacks`): through the API (:func:`export.build.build`),
`schedx export` (text, JSON, manifest), the Export page, the notes of a bench (one line per kernel,
naming its rows), a batch sweep (`schedx sweep` and the Profile page's sweep tab) and a profile. A
kernel whose specialised rule does not claim it (it raises ``NotApplicable``: the general rule is
its rule), a kernel the build rebuilt with the last rule (it says so itself), and a normal model give
no such line.

Each line ends with the `schedx tune` command that searches its task as the build made it
(:mod:`export.tune_command`): the command is run through the CLI's own parsing into a
:class:`search.job_spec.JobSpec`, which must validate and hold that task, for each kind of build (a
zoo model, an ONNX file, one with symbolic dimensions fixed by shapes, a kernel spec, a model's fused
kernel, a bf16 and an int8 model); a build for another CPU names that CPU as it is spelled.

No kernel shape the rules refuse is known (zoo models, ONNX test models and odd kernels for
znver5, Haswell, Sapphire Rapids and NEON all schedule at the first row), so the failure is
forced, and made by TVM: the step the tiled rule calls is replaced by one TVM refuses (vectorizing
a reduction loop raises a real ``ScheduleError``, whose message goes through the rules' reason and
the line's cut), or by one TVM accepts and :mod:`explorer.schedule.lint` finds wrong (a parallel
loop inside a parallel loop). The dot-product cases are real: a bf16 convolution whose output rows
no vdpbf16ps tile divides on znver5 (a kernel built by hand: the bf16 pass sends such convolutions
to im2col), and, built by hand too, a bf16 product on an AVX2 CPU (a bf16 build for it is refused).
"""

from __future__ import annotations

import json
import re
import shlex
from pathlib import Path

import numpy as np
import onnx
import pytest
import tvm
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

from explorer.schedule.defaults import apply as defaults_apply
from explorer.schedule.defaults.analysis import NotApplicable
from explorer.schedule.defaults.apply import RULE_ATTR
from explorer.target import host_target, parse_target
from explorer.workload import load_workload

pytestmark = pytest.mark.heavy  # real builds (and a page): left out of make test-fast

TVM_SAYS = 'The "vectorize" cannot be fulfilled'  # what TVM says when a reduction loop is vectorized
FAILED = "its tiled schedule (register tiles around the main reduction, the other blocks parallel and vectorized) " \
         "failed on it ("
PLAIN = ("the plain schedule took it instead (nothing tiled: each block's outer loop parallel, its inner loop "
         "vectorized; often many times slower)")


@pytest.fixture(scope="module")
def one_conv(tmp_path_factory) -> Path:
    """Conv (3x3, 8 -> 16 channels, bias) then Relu: one convolution kernel after fusion."""
    rng = np.random.default_rng(0)
    weight = numpy_helper.from_array(rng.standard_normal((16, 8, 3, 3)).astype(np.float32), "w")
    bias = numpy_helper.from_array(rng.standard_normal(16).astype(np.float32), "b")
    graph = helper.make_graph(
        [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]), helper.make_node("Relu", ["c"], ["y"])],
        "one_conv", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 8, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 16, 16, 16])], [weight, bias])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    path = tmp_path_factory.mktemp("onnx") / "one_conv.onnx"
    onnx.save(model, path)
    return path


def _vectorize_the_reduction(sch, block, *args, **kwargs) -> str:
    """A tiling step TVM refuses: the reduction's innermost loop vectorized (a real ``ScheduleError``)."""
    sch.vectorize(sch.get_loops(block)[-1])
    return "never reached"


def _refuse_register_tiles(monkeypatch, refusal=_vectorize_the_reduction) -> None:
    monkeypatch.setattr(defaults_apply, "tile_reduction", refusal)


SEARCH = re.compile(r"; search it \(`(?P<command>schedx tune [^`]+)`\), or report it with the reason in brackets$")
SEARCH_ITS_TASK = "search its task (`schedx tune`), or report it with the reason in brackets"  # no command given


def _command(line: str) -> str | None:
    """The `schedx tune` command a line suggests."""
    found = SEARCH.search(line)
    return found["command"] if found else None


def _is_line(text: str, task: str) -> bool:
    """The line a task whose tiled rule TVM refused gets: TVM's reason, the plain rule, a command."""
    return text.startswith(f"kernel {task}: {FAILED}{TVM_SAYS}") and f"); {PLAIN}; search it (`schedx tune " in text \
        and _command(text) is not None


def _validated(monkeypatch, command: str):
    """``command`` through `schedx tune`'s own parsing (options, calibration, the JobSpec it makes),
    stopped where the search would start: the :class:`search.job_spec.ValidJob` its spec validates to."""
    import click

    import search.entry
    from app.cli import cli

    argv = shlex.split(command)
    assert argv[:2] == ["schedx", "tune"], command
    specs = []

    def validate_only(spec, *, here=False):
        specs.append(spec)
        raise click.exceptions.Exit(0)  # (nothing searched)

    monkeypatch.setattr(search.entry, "prepare", validate_only)
    result = CliRunner().invoke(cli, argv[1:])
    assert result.exit_code == 0 and len(specs) == 1, (command, result.output, result.exception)
    return specs[0].validate()


def _fallbacks(warnings) -> list[str]:
    return [w for w in warnings if w.startswith("kernel ")]


def _conv_task(spec: str) -> tuple[str, str]:
    """The convolution's function name and its task's name (``model/fused_...``)."""
    (task,) = [t for t in load_workload(spec).for_target(host_target()).tasks() if "conv2d" in t.name]
    return task.funcs[0], task.name


def _build(spec: str):
    from export.build import build

    return build(load_workload(spec), host_target())


def test_a_failed_rule_is_one_warning_through_the_api(monkeypatch, one_conv):
    _refuse_register_tiles(monkeypatch)
    built = _build(str(one_conv))
    conv, task = _conv_task(str(one_conv))
    (line,) = _fallbacks(built.warnings)
    assert _is_line(line, task) and len(line) < 700, line  # TVM's reason, cut
    rules = {gv.name_hint: str(f.attrs[RULE_ATTR]) for gv, f in built.lowered.functions_items()
             if f.attrs is not None and RULE_ATTR in f.attrs}
    assert rules[conv] == "safe" and all(r == "full" for n, r in rules.items() if n != conv), rules


def test_a_schedule_lint_finds_wrong_is_a_warning_too(monkeypatch):
    """TVM accepts a parallel loop inside a parallel one; the lint refuses it, and that is a fallback too
    (compile only)."""
    def nest_parallel_loops(sch, block, *args, **kwargs):
        outer, inner = sch.get_loops(block)[:2]
        sch.parallel(outer)
        sch.parallel(inner)
        return "nested parallel loops"

    _refuse_register_tiles(monkeypatch, nest_parallel_loops)
    target = parse_target("cpu:haswell")
    mod = load_workload("matmul:M=64,N=64,K=32").fused_module()
    scheduled, notes, _ = target.apply_default_schedules(mod, target.tvm())
    (name,) = [gv.name_hint for gv, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert str(scheduled[name].attrs[RULE_ATTR]) == "safe"
    assert len(notes) == 1 and notes[0].startswith(f"kernel {name}: {FAILED}") and "parallel" in notes[0], notes
    assert notes[0].endswith(f"); {PLAIN}; {SEARCH_ITS_TASK}"), notes  # no build: no command to suggest


def test_the_caller_names_the_task_and_its_command():
    """``task_names`` and ``tune_commands`` (a build's: :func:`export.build.prepare`) name the kernel by its
    task and end its line with the command, passed as plain keywords (compile only)."""
    target = parse_target("cpu:znver5")
    mod = tvm.IRModule({"conv": _conv_bf16_rows_of(17)})
    _, notes, _ = target.apply_default_schedules(mod, target.tvm(), task_names={"conv": "model/fused_conv"},
                                              tune_commands={"model/fused_conv": "schedx tune model --target cpu"})
    assert len(notes) == 1 and notes[0].startswith("kernel model/fused_conv: its bf16 product"), notes
    assert _command(notes[0]) == "schedx tune model --target cpu", notes


def test_a_rule_that_does_not_claim_the_kernel_is_no_fallback(monkeypatch, one_conv):
    """``NotApplicable``: the register tile does not fit; the general rules are the kernel's rule."""
    def does_not_fit(*args, **kwargs):
        raise NotApplicable("no tile fits")

    _refuse_register_tiles(monkeypatch, does_not_fit)
    built = _build(str(one_conv))
    assert _fallbacks(built.warnings) == [], built.warnings
    rules = [str(f.attrs[RULE_ATTR]) for _, f in built.lowered.functions_items()
             if f.attrs is not None and RULE_ATTR in f.attrs]
    assert rules and set(rules) == {"full"}


def test_a_kernel_the_build_rebuilt_with_the_last_rule_is_left_to_the_build():
    """A kernel in ``safe`` (its first schedule did not compile) gets the last rule and a reason, but no
    line here: the build says it rebuilt it (compile only)."""
    target = parse_target("cpu:haswell")
    mod = load_workload("matmul:M=64,N=64,K=32").fused_module()
    (name,) = [gv.name_hint for gv, f in mod.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    scheduled, notes, _ = target.apply_default_schedules(mod, target.tvm(), frozenset({name}))
    assert str(scheduled[name].attrs[RULE_ATTR]) == "safe" and notes == [], notes


def _conv_bf16_rows_of(width: int) -> tvm.tirx.PrimFunc:
    """A direct NHWC bf16 convolution (3x3, 16 -> 16 channels) whose output rows are ``width`` pixels."""
    from tvm import te

    from explorer.passes.bf16_conv_nhwc import conv2d_nhwc_bf16

    x = te.placeholder((1, width + 2, width + 2, 16), "float32", "x")
    w = te.placeholder((1, 3, 3, 8, 16, 2), "uint16", "w")
    return te.create_prim_func([x, w, conv2d_nhwc_bf16(x, w, out_hw=(width, width))])


def test_a_bf16_product_whose_shape_the_tile_refuses_gets_a_softer_line():
    """On znver5 (vdpbf16ps) a bf16 convolution whose output rows of 17 pixels no tile of 2-16 divides: the
    tile declines it (``NotApplicable``) and it runs on the fp32-style register tile; the line says so and
    why, and suggests a search (compile only)."""
    target = parse_target("cpu:znver5")
    scheduled, notes, _ = target.apply_default_schedules(tvm.IRModule({"conv": _conv_bf16_rows_of(17)}), target.tvm())
    assert str(scheduled["conv"].attrs[RULE_ATTR]) == "full"
    assert notes == ["kernel conv: its bf16 product ran on the fp32-style register tile, not on bf16 dot-product "
                     f"instructions (no tile of 2-16 pixels divides output rows of 17); {SEARCH_ITS_TASK}"], notes


def test_a_product_on_a_cpu_without_its_instructions_is_told_to_build_otherwise():
    """A bf16 product on an AVX2 CPU (no vdpbf16ps, no AMX): a search cannot give the CPU the instructions, so
    the line says to build in fp32 or for a CPU that has them. No build reaches it (a bf16 build for that CPU
    is refused first, and an int8 one keeps its products in float there): a kernel built by hand, compile only."""
    from tests.bf16_products import dense_bf16_func

    target = parse_target("cpu:x86-64-v3")
    _, notes, _ = target.apply_default_schedules(tvm.IRModule({"dense": dense_bf16_func(8, 32, 64)}), target.tvm(),
                                              tune_commands={"dense": "schedx tune dense --target cpu:haswell"})
    assert notes == ["kernel dense: its bf16 product ran on the fp32-style register tile, not on bf16 dot-product "
                     "instructions (this CPU has no AVX512-BF16 nor AMX-BF16 instructions); build it in fp32, or for "
                     "a CPU with bf16 dot-product instructions"], notes


@pytest.mark.parametrize("spec", ["small_cnn", "one_conv"])
def test_a_normal_model_has_no_fallback_warning(spec, one_conv):
    built = _build(str(one_conv) if spec == "one_conv" else spec)
    assert built.warnings and _fallbacks(built.warnings) == [], built.warnings  # (the no-record warning is there)


def test_schedx_export_prints_the_warning(monkeypatch, one_conv, tmp_path):
    from app.cli import cli

    _refuse_register_tiles(monkeypatch)
    _, task = _conv_task(str(one_conv))
    args = ["export", str(one_conv), "--target", "cpu", "--no-db", "--no-layers"]
    text = CliRunner().invoke(cli, [*args, "-o", str(tmp_path / "text")])
    assert text.exit_code == 0, text.output
    lines = [ln for ln in text.output.splitlines() if ln.startswith("  warning: kernel ")]
    assert len(lines) == 1 and _is_line(lines[0].removeprefix("  warning: "), task), text.output
    as_json = CliRunner().invoke(cli, [*args, "--no-verify", "-o", str(tmp_path / "json"), "--json"])
    assert as_json.exit_code == 0, as_json.output
    out = getattr(as_json, "stdout", as_json.output)
    report = json.loads(out[out.index("{"):])
    assert _fallbacks(report["warnings"]) == [lines[0].removeprefix("  warning: ")]
    manifest = json.loads((tmp_path / "json" / "manifest.json").read_text())
    assert _fallbacks(manifest["warnings"]) == _fallbacks(report["warnings"])


def test_the_export_page_shows_the_warnings(monkeypatch, tmp_path):
    """The page's default workload (small_cnn): each task the build says fell back, one warning."""
    from streamlit.testing.v1 import AppTest

    _refuse_register_tiles(monkeypatch)
    expected = _fallbacks(_build("small_cnn").warnings)
    assert expected and all(PLAIN in w and w.startswith("kernel small_cnn/") for w in expected), expected
    page = str(Path(__file__).resolve().parent.parent / "app" / "ui" / "export_page.py")
    at = AppTest.from_file(page, default_timeout=300).run()
    at.sidebar.text_input(key="ex_db").set_value(str(tmp_path / "none.db")).run()
    at.button(key="ex_build").click().run()
    assert not at.exception, at.exception
    assert _fallbacks(w.value for w in at.warning) == expected, [w.value for w in at.warning]


def test_bench_says_each_kernel_once_with_its_rows_and_profile_repeats_it(monkeypatch, one_conv):
    """`schedx bench` prints its report's notes: a kernel that fell back in both builds (with records, none
    applying here, and without) is one note naming both rows; `schedx profile` and the Profile page
    print theirs."""
    from export.bench import DEFAULT_ROW, TUNED_ROW, bench_workload
    from export.profile import profile_workload
    from export.schedules import TaskSchedule

    _refuse_register_tiles(monkeypatch)
    _, task = _conv_task(str(one_conv))
    bench = bench_workload(str(one_conv), schedules={"no/such_task": TaskSchedule(steps=())}, runs=3, budget_s=1.0,
                           rounds=1)
    noted = [n for n in bench.notes if "kernel " in n]
    assert len(noted) == 1 and _is_line(noted[0].removeprefix(f"{TUNED_ROW}, {DEFAULT_ROW}: "), task), bench.notes
    assert f"note: {noted[0]}" in bench.table()
    profile = profile_workload(str(one_conv), "cpu", runs=3, ort=False)
    assert [n for n in profile.notes if n.startswith("kernel ")] == [noted[0].split(": ", 1)[1]], profile.notes


def test_a_sweep_notes_the_warning_per_batch_and_its_tab_shows_it(monkeypatch, one_conv, tmp_path):
    """`schedx sweep` prints the sweep's notes; the Profile page's sweep tab shows them under its table."""
    from streamlit.testing.v1 import AppTest

    from export.sweep import sweep

    _refuse_register_tiles(monkeypatch)
    _, task = _conv_task(str(one_conv))
    result = sweep(str(one_conv), [1], runs=2, budget_s=1.0)
    noted = [n for n in result.notes if "kernel " in n]
    assert len(noted) == 1 and noted[0].startswith("batch 1: ") and _is_line(noted[0].removeprefix("batch 1: "),
                                                                               task), result.notes
    page = str(Path(__file__).resolve().parent.parent / "app" / "ui" / "profile_page.py")
    at = AppTest.from_file(page, default_timeout=300)
    at.session_state["db_path"] = str(tmp_path / "p.db")
    at.run()
    at.sidebar.text_input(key="profile_spec").set_value(str(one_conv)).run()
    at.text_input(key="profile_batches").set_value("1").run()
    at.number_input(key="profile_sweep_runs").set_value(2).run()
    at.button(key="profile_sweep").click().run()
    assert not at.exception and not at.error, [e.value for e in at.error]
    assert [c.value for c in at.caption if c.value.startswith("batch 1: kernel ")] == noted


def test_a_failed_first_choice_of_the_full_rule_names_the_simpler_choice(monkeypatch):
    """Two output axes run as one fail (TVM refuses the step): the kernel keeps register tiles of one output
    row (the next row of the rules), and the warning says that simpler tiling took it, not the plain
    schedule (AVX2, compile only)."""
    from explorer.schedule.defaults import tiling

    def refuse(sch, block, *args, **kwargs):
        _vectorize_the_reduction(sch, block)

    monkeypatch.setattr(tiling, "fuse_rows", refuse)
    target = parse_target("cpu:haswell")
    mod = load_workload("conv2d_nhwc:N=1,C=512,H=7,W=7,K=512,R=3,S=3,stride=1,pad=1").fused_module()
    scheduled, notes, _ = target.apply_default_schedules(mod, target.tvm())
    (name,) = [gv.name_hint for gv, f in scheduled.functions_items() if isinstance(f, tvm.tirx.PrimFunc)]
    assert str(scheduled[name].attrs[RULE_ATTR]) == "full"
    assert len(notes) == 1 and notes[0].startswith(f"kernel {name}: {FAILED}{TVM_SAYS}"), notes
    assert notes[0].endswith(f"); a simpler tiling took it instead (the rows not fused, or no tail tile); "
                             f"{SEARCH_ITS_TASK}"), notes


def _refuse_dot_tiles(monkeypatch) -> None:
    """The bf16 and int8 dot-product tiles decline every product, as for a shape they do not fit."""
    def does_not_fit(*args, **kwargs):
        raise NotApplicable("the shape does not fit the tile")

    monkeypatch.setattr(defaults_apply, "tile_int8", does_not_fit)
    monkeypatch.setattr(defaults_apply, "tile_bf16", does_not_fit)


@pytest.mark.parametrize("kind", ["zoo model", "ONNX file", "ONNX file with shapes", "kernel spec",
                                  "a model's fused kernel", "bf16 model", "int8 model"])
def test_the_suggested_command_searches_that_task(monkeypatch, one_conv, tmp_path, kind):
    """Each kind of build: its lines' command goes through `schedx tune`'s parsing into a JobSpec that
    validates, and the job it names searches the task the line names (the same workload key)."""
    from explorer.precision import Calibration, check_precision
    from export.build import as_built, prepare
    from tests.conftest import tiny_cnn

    target, precision, shapes, calibration = host_target(), "fp32", None, None
    spec = {"zoo model": "small_cnn", "ONNX file": str(one_conv), "kernel spec": "matmul:M=64,N=64,K=32",
            "bf16 model": str(one_conv), "int8 model": str(one_conv)}.get(kind)
    if kind == "ONNX file with shapes":
        spec, shapes = str(tmp_path / "batch_n.onnx"), "input:2x3x16x16"
        onnx.save(tiny_cnn("N"), spec)
    elif kind == "a model's fused kernel":
        spec = f"{one_conv}/{_conv_task(str(one_conv))[1].rpartition('/')[2]}"
    elif kind == "bf16 model":
        precision = "bf16"
        try:
            check_precision("bf16", target)
        except Exception as err:  # noqa: BLE001 - the host lacks bf16 instructions
            pytest.skip(f"a bf16 build needs AVX512-BF16 or AMX-BF16 on this machine: {err}")
    elif kind == "int8 model":
        precision, calibration = "int8", Calibration(samples=4)  # not the default: the command must say so
    _refuse_register_tiles(monkeypatch)
    _refuse_dot_tiles(monkeypatch)
    built = as_built(load_workload(spec, shapes), target, precision, calibration)[0]
    prepared = prepare(built, target, precision=precision)
    tasks = {o.task.name: o.task for o in prepared.outcomes}
    lines = _fallbacks(prepared.notes)
    assert lines, prepared.notes
    seen = {}
    for line in lines:
        task, command = line.removeprefix("kernel ").split(": ", 1)[0], _command(line)
        assert task in tasks and command, line
        if command not in seen:
            seen[command] = {t.key for t in _validated(monkeypatch, command).tasks}
        assert tasks[task].key in seen[command], (line, command)
    if kind == "int8 model":
        assert all("--precision int8" in c and "--calibrate 4" in c for c in seen), seen
    if kind == "bf16 model":
        assert all("--precision bf16" in c for c in seen), seen


def test_a_build_for_another_cpu_names_its_target_as_spelled():
    """An aarch64 build (compile only; its search needs an RPC device): the command's --target is that
    CPU's spelling, which parses back to the build's target."""
    from export.build import prepare

    target = parse_target("aarch64:cortex-a76")
    with pytest.MonkeyPatch.context() as mp:
        _refuse_register_tiles(mp)
        notes = prepare(load_workload("matmul:M=64,N=64,K=32"), target).notes
    (line,) = _fallbacks(notes)
    argv = shlex.split(_command(line))
    assert argv[:3] == ["schedx", "tune", "matmul:M=64,N=64,K=32"], argv
    assert parse_target(argv[argv.index("--target") + 1]).key == target.key, argv


@pytest.mark.parametrize("precision", ["fp32", "int8"])
def test_a_profiles_tune_lines_are_the_commands_a_fallback_warning_names(monkeypatch, one_conv, precision):
    """`schedx profile` ends with the searches of its hottest kernels: each line is :func:`tune_command`'s
    command (plus ``--minutes``), so it parses into a job that searches the kernel the profile timed (at int8 the
    float model with the calibration it was quantized with), as a fallback warning's command does."""
    from app.cli import cli

    argv = ["profile", str(one_conv), "--no-db", "--runs", "2", "--top", "3", "--precision", precision]
    if precision == "int8":
        argv += ["--calibrate", "4"]
    result = CliRunner().invoke(cli, argv)
    assert result.exit_code == 0, result.output
    lines = [line.strip() for line in result.output.splitlines() if line.strip().startswith("schedx tune ")]
    assert lines, result.output
    for line in lines:
        command, _, comment = line.partition("  # ")
        argv = shlex.split(command)
        minutes = argv[argv.index("--minutes") + 1]
        del argv[argv.index("--minutes"):argv.index("--minutes") + 2]
        job = _validated(monkeypatch, shlex.join(argv))
        if precision == "fp32":  # one kernel a line, by its function, five minutes
            assert argv[2].startswith(f"{one_conv}/") and len(job.tasks) == 1 and minutes == "5", line
        else:  # its kernels exist only in the quantized model: one search of the model for them all, 5 minutes each
            kernels = comment.partition(":")[0].split(", ") if "," in comment else ["one"]  # names listed if several
            assert len(lines) == 1 and minutes == str(5 * len(kernels)), line
            assert "--precision int8" in command and "--calibrate 4" in command and f"{one_conv}/" not in command

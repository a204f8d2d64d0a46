"""Every ``schedx`` command under random arguments (hypothesis): whatever is typed, no traceback,
exit status 0 or 1 (click's usage errors included: they used to exit 2 with the usage block), and
an error is one line (``Error: ...``) as the last thing printed.

The fuzz runs in a scratch folder (a random path names a file there, never in the project), and
is bounded: examples that would start real work get small inputs (8x8 kernels, a 6-node ONNX
model, a tiny bundle), ``tune`` always measures through an RPC tracker nobody listens on (so it
is refused before any search starts), ``ui`` always gets a port that is not a number, and the
commands that export and time whole models (profile, sweep) get valid models only in the slow
variant. The default run takes well under a minute; ``-m slow`` runs many more examples.
"""

from __future__ import annotations

import os
from pathlib import Path

import onnx
import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import cli
from tests.conftest import tiny_cnn
from tests.store_cases import fill_demo

# what users type, and what a hostile one does: empty, huge, non-ASCII digits, NUL, JSON, paths
TEXT = st.one_of(
    st.text(max_size=30),
    st.sampled_from(["", " ", "0", "-1", "1", "3", "99999999999999999999", "1e400", "nan", "inf", "-inf", "0.5",
                     "\uff12\uff10", "\u0661", "*", "[", "?*[", "2020-13-45", "2025-01-01", '{"kind": "llvm"}',
                     '{"kind": "llvm", "mcpu": 123}', '{"kind": 1}', "[1]", "llvm", "cuda", "cuda:sm_90", "aarch64",
                     "cpu:nosuchcpu", "x" * 3000, "\x00", "a\nb", "../../etc/passwd", "%s%s%n",
                     "'; DROP TABLE records; --", "matmul:M=1,M=2", "conv2d_nchw:pad=-5", "matmul:M=\uff15",
                     "input:1x3x99999999x99999999", "batch=0", "resnet18/nope", "example:nope", "nope.onnx"]),
)
SMALL_INT = st.one_of(st.integers(-3, 40).map(str), TEXT)
KERNELS = st.one_of(TEXT, st.sampled_from(["matmul:M=8,N=8,K=8", "softmax:M=4,N=8", "matmul:M=8,N=8,K=8,dtype=float16",
                                           "conv2d_nchw:N=1,C=2,H=6,W=6,K=2,R=3,S=3,stride=1,pad=0", "matmul",
                                           "matmul:K=0", "layer_norm:M=4,N=8"]))
TARGETS = st.one_of(TEXT, st.sampled_from(["cpu", "cpu:x86-64", "cpu:znver4", "cuda:sm_80", "aarch64", "llvm"]))
PATHS = st.one_of(st.sampled_from(["out", "sub/out", "out.db", "", ".", "a b", "deep/er/x.json"]),
                  st.text(alphabet="abcxyz._-", min_size=1, max_size=12))


def _files(root: Path) -> dict:
    """Real inputs to hand the commands: a tiny ONNX model, a steps file, a bad steps file, a
    database with records, a tiny kernel bundle."""
    root.mkdir(parents=True, exist_ok=True)
    model = root / "tiny.onnx"
    onnx.save(tiny_cnn("N"), model)
    steps = root / "steps.json"
    steps.write_text('[{"primitive": "split", "args": {"loop": "C/i", "factors": [null, 4]}}]')
    deep = root / "deep.json"
    deep.write_bytes(b"[" * 50_000)
    binary = root / "binary.json"
    binary.write_bytes(bytes(range(256)))
    db = root / "demo.db"
    fill_demo(db, hardware="fuzz/2c")
    from export import export_workload

    bundle = root / "bundle"
    export_workload("matmul:M=8,N=8,K=8", "cpu", bundle, verify=False, layers=False)
    return {"model": str(model), "steps": str(steps), "deep": str(deep), "binary": str(binary), "db": str(db),
            "bundle": str(bundle)}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return _files(tmp_path_factory.mktemp("fuzz-files"))


def _spec(f: dict, heavy: bool) -> dict:
    """command -> (positional argument strategies, {option: value strategy}, flags)."""
    model = st.one_of(TEXT, st.sampled_from([f["model"], "small_cnn"])) if heavy else TEXT
    db = st.one_of(st.just(f["db"]), PATHS, TEXT)
    files = st.one_of(st.sampled_from([f["steps"], f["deep"], f["binary"], f["db"], f["model"]]), PATHS, TEXT)
    return {
        "models": ([], {}, ["--json"]),
        "pipelines": ([], {}, ["--json"]),
        "passes": ([st.one_of(TEXT, st.sampled_from([f["model"], "small_cnn"]))],
                   {"--pipeline": st.one_of(TEXT, st.sampled_from(["tuning", "cpu-default", "zero"])),
                    "--passes": st.one_of(TEXT, st.sampled_from(["FuseOps", "LegalizeOps,FuseOps", "Nope"])),
                    "--shapes": st.one_of(TEXT, st.sampled_from(["input:1x3x16x16", "N=1", "N=2"])),
                    "--out": PATHS}, ["--json", "--all"]),
        "ui": ([], {"--port": st.text(alphabet="abc-.", min_size=1, max_size=5), "--host": TEXT}, ["--headless"]),
        "kernels": ([], {"--model": st.one_of(TEXT, st.just(f["model"])), "--shapes": TEXT}, ["--json"]),
        "measure": ([KERNELS], {"--steps": files, "--repeat": SMALL_INT, "--timeout": SMALL_INT, "--target": TARGETS,
                                "--db": db}, ["--json", "--no-isolate"]),
        "sketches": ([KERNELS], {"--rules": st.one_of(TEXT, st.just("MultiLevelTiling")),
                                 "--sample": st.one_of(st.integers(0, 2).map(str), TEXT), "--target": TARGETS},
                     ["--json"]),
        "tune": ([KERNELS], {"--trials": SMALL_INT, "--minutes": TEXT, "--per-batch": SMALL_INT,
                             "--population": SMALL_INT, "--generations": SMALL_INT, "--mutate-prob": TEXT,
                             "--eps-greedy": TEXT, "--seed": TEXT, "--cost-model": TEXT, "--timeout": SMALL_INT,
                             "--target": TARGETS, "--shapes": TEXT, "--db": db, "--rpc-key": TEXT},
                 ["--json", "--background"]),
        "jobs": ([], {"--db": db}, ["--json"]),
        "jobs stop": ([SMALL_INT], {}, []),
        "leaderboard": ([], {"--db": db, "--workload": TEXT, "--target": TEXT, "--hardware": TEXT, "--source": TEXT,
                             "--kind": TEXT, "--since": TEXT, "--top": SMALL_INT}, ["--json", "--csv", "--any-hardware"]),
        "db info": ([], {"--db": db}, ["--json"]),
        "db import": ([files], {"--db": db, "--hardware": TEXT, "--source": TEXT}, ["--json"]),
        "db export": ([PATHS], {"--db": db, "--target": TEXT, "--hardware": TEXT}, ["--json", "--force"]),
        "db merge": ([db], {"--db": db}, ["--json"]),
        "export": ([st.one_of(KERNELS, model) if heavy else KERNELS],
                   {"--target": TARGETS, "-o": PATHS, "--db": db, "--hardware": TEXT, "--shapes": TEXT,
                    "--threads": SMALL_INT, "--sign": st.one_of(st.just(f["model"]), PATHS, TEXT)},
                   ["--no-db", "--no-verify", "--no-layers", "--no-nvcc", "--json"]),
        "run": ([st.one_of(st.just(f["bundle"]), PATHS, TEXT)],
                {"--runs": SMALL_INT, "--budget": st.one_of(st.sampled_from(["0", "0.1", "-1", "nan"]), TEXT),
                 "--threads": SMALL_INT, "--target": TARGETS,
                 "--trust": st.one_of(st.sampled_from([f["model"], f["db"]]), PATHS, TEXT)}, ["--no-baselines", "--json"]),
        "bench": ([KERNELS], {"--db": db, "--shapes": TEXT, "--runs": SMALL_INT,
                              "--budget": st.sampled_from(["0.05", "nan", "-1", "x"]), "--threads": SMALL_INT,
                              "--target": TARGETS}, ["--no-db", "--json"]),
        "quantize": ([st.one_of(TEXT, st.just(f["model"]))],
                     {"--calibrate": st.one_of(st.integers(-1, 3).map(str), TEXT), "-o": PATHS, "--shapes": TEXT,
                      "--data": files, "--eval": st.one_of(st.integers(-1, 3).map(str), TEXT),
                      "--activations": TEXT, "--threads": SMALL_INT, "--seed": TEXT},
                     ["--per-tensor", "--no-preprocess", "--json"]),
        "targets": ([], {}, ["--all", "--json"]),
        "keygen": ([PATHS], {}, ["--json"]),
        "profile": ([model], {"--target": TARGETS, "--shapes": TEXT, "--db": db, "--runs": SMALL_INT,
                              "--threads": SMALL_INT, "--top": SMALL_INT}, ["--no-db", "--json"]),
        "sweep": ([model], {"--batch": st.one_of(TEXT, st.just("1,2")), "--target": TARGETS,
                            "--trials": st.one_of(st.just("0"), TEXT), "--db": db, "--threads": SMALL_INT,
                            "--runs": SMALL_INT, "--out": PATHS}, ["--json"]),
    }


@st.composite
def invocations(draw, f: dict, heavy: bool):
    spec = _spec(f, heavy)
    command = draw(st.sampled_from(sorted(spec)))
    positional, options, flags = spec[command]
    args = command.split()
    if draw(st.integers(0, 9)) == 0:  # now and then, a global option or a missing argument
        args = draw(st.sampled_from([["--debug"], [], ["--nope"]]))[:0] + args
        positional = []
    args += [draw(p) for p in positional]
    for option in draw(st.lists(st.sampled_from(sorted(options)), max_size=4)) if options else []:
        args += [option, draw(options[option])]
    args += draw(st.lists(st.sampled_from(flags), max_size=2, unique=True)) if flags else []
    if draw(st.integers(0, 19)) == 0:
        args.append(draw(st.sampled_from(["--bogus", "extra", "--help"])))
    if command == "tune":  # measured through a tracker nobody listens on: refused before any search starts
        args += ["--rpc-tracker", "127.0.0.1:1", "--rpc-key", "fuzz"]
    if command == "ui":
        args += ["--port", "not-a-port"]
    return args


def _check(args: list[str], scratch: Path) -> None:
    here = os.getcwd()
    os.chdir(scratch)  # a random path names a file here, never in the project folder
    try:
        result = CliRunner().invoke(cli, args, obj={})
    finally:
        os.chdir(here)
    output = result.output
    assert result.exit_code in (0, 1), (args, result.exit_code, output[-2000:])
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in output, (args, output[-3000:])
    assert "unexpected" not in output or "Error: unexpected" not in output, (args, output[-1000:])
    errors = [line for line in output.splitlines() if line.startswith("Error: ")]
    if result.exit_code == 1 and errors and all(a.isprintable() for a in args):
        assert len(errors) == 1 and output.rstrip().splitlines()[-1] == errors[0], (args, output[-2000:])


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                   HealthCheck.too_slow])
@given(data=st.data())
def test_no_command_gives_a_traceback_or_exit_2(files, tmp_path_factory, data):
    scratch = tmp_path_factory.getbasetemp() / "cli-fuzz-cwd"
    scratch.mkdir(exist_ok=True)
    _check(data.draw(invocations(files, heavy=False)), scratch)


@pytest.mark.slow
@settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                    HealthCheck.too_slow])
@given(data=st.data())
def test_no_command_gives_a_traceback_many_examples(files, tmp_path_factory, data):
    scratch = tmp_path_factory.getbasetemp() / "cli-fuzz-cwd-slow"
    scratch.mkdir(exist_ok=True)
    _check(data.draw(invocations(files, heavy=True)), scratch)


@pytest.mark.parametrize("args, words", [
    (["nosuch"], "No such command"),
    (["tune"], "Missing argument"),
    (["tune", "matmul", "--bogus"], "No such option"),
    (["passes", "small_cnn", "--pipeline", "tuning", "--passes", "FuseOps"], "either --pipeline or --passes"),
    (["measure", "matmul:M=1,M=2"], "given twice"),
    (["measure", "conv2d_nchw:pad=-5"], "at least 0"),
    (["measure", "matmul:M=\uff15\uff11\uff12"], "digits 0-9"),
    (["jobs", "stop", "99999999999999999999"], "far outside"),
])
def test_usage_and_input_errors_are_one_line_and_exit_1(tmp_path, args, words):
    here = os.getcwd()
    os.chdir(tmp_path)
    try:
        result = CliRunner().invoke(cli, args, obj={})
    finally:
        os.chdir(here)
    assert result.exit_code == 1, (args, result.output)
    lines = result.output.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("Error: ") and words in lines[0], result.output


def test_a_closed_stdout_ends_quietly(tmp_path):
    """``schedx pipelines | true``: the reader is gone before anything is written; no BrokenPipeError."""
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    proc = subprocess.run(f"{sys.executable} -m app.cli pipelines | true", shell=True, cwd=root,
                          capture_output=True, text=True, timeout=120)
    assert "Traceback" not in proc.stderr and "BrokenPipe" not in proc.stderr, proc.stderr


@pytest.mark.parametrize("args", [["run", "\x00"], ["export", "matmul", "-o", "\x00"], ["keygen", "\x00"],
                                  ["sweep", "small_cnn", "--out", "\x00"]])
def test_a_nul_character_in_a_path_is_one_line_of_error(args):
    """click.Path looks a path up with os.stat, which raises ValueError on a NUL (found by the
    fuzz test above: `schedx run $'\\x00'` was an "unexpected" error)."""
    result = CliRunner().invoke(cli, args, obj={})
    assert result.exit_code == 1 and "NUL character" in result.output, result.output


@pytest.mark.parametrize("make", ["fifo", "device"])
@pytest.mark.parametrize("args", [["measure", "matmul:M=64,N=64,K=64", "--steps", "{path}"],
                                  ["leaderboard", "--db", "{path}"], ["sweep", "small_cnn", "--out", "{path}"]],
                         ids=["measure --steps", "leaderboard --db", "sweep --out"])
def test_a_fifo_or_a_device_given_as_a_file_is_refused_at_once(args, make, tmp_path):
    """Issue 30, probe 5: `schedx measure ... --steps fifo.json` waited forever for a writer. Every
    file argument refuses a FIFO or a device by what it is, before anything opens it."""
    import os

    if make == "fifo":
        path = tmp_path / "fifo.json"
        os.mkfifo(path)
    else:
        path = tmp_path / "urandom"
        path.symlink_to("/dev/urandom")
    result = CliRunner().invoke(cli, [a.format(path=path) for a in args], obj={})
    words = "a FIFO" if make == "fifo" else "a character device"
    assert result.exit_code == 1 and words in result.output, result.output
    assert result.output.strip().startswith("Error: "), result.output


@pytest.mark.parametrize("args, words", [
    (["leaderboard", "--db", "/nonexistent/dir/db.sqlite"], "the folder /nonexistent/dir does not exist"),
    (["measure", "matmul:M=+5,N=8,K=8", "--repeat", "1"], "digits 0-9"),
    (["measure", "matmul:M=8,N=8,K=8", "--target", "", "--repeat", "1"], "an empty target"),
    (["measure", "matmul:M=8,N=8,K=8", "--target", "  ", "--repeat", "1"], "an empty target"),
], ids=["leaderboard in a missing folder", "a plus sign", "an empty target", "a blank target"])
def test_a_slip_is_refused_not_taken_for_a_default(args, words, tmp_path):
    """Issue 30, probe 7: a database in a folder that does not exist read as "No records yet." and
    exit 0; `M=+5` and `--target ''` were accepted (the empty target as this machine)."""
    if args[0] == "measure":
        args = [*args, "--db", str(tmp_path / "s.db")]
    result = CliRunner().invoke(cli, args, obj={})
    assert result.exit_code == 1 and words in result.output, result.output
    assert not (tmp_path / "s.db").exists()  # refused before anything was measured or saved


def test_the_default_database_whose_folder_is_not_made_yet_is_an_empty_leaderboard(tmp_path, monkeypatch):
    """The folder check is for a --db the user typed: on a fresh machine the default database's
    folder does not exist until the first write, and the leaderboard is simply empty."""
    monkeypatch.delenv("SCHEDX_DB", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "home" / "data"))
    result = CliRunner().invoke(cli, ["leaderboard"], obj={})
    assert result.exit_code == 0 and "No records yet" in result.output, result.output


def test_dev_null_stays_a_place_to_throw_output_away(tmp_path):
    from app.cli_types import FilePath

    assert str(FilePath(dir_okay=False).convert("/dev/null", None, None)) == "/dev/null"


# Issue 49, item 6: every command's --db goes through one check (store.paths.check_db_path) before
# SQLite sees the path; `tune`/`measure --db /dev/full` created /dev/full-journal (0666) and said
# "disk full (12068.9 MB free)". Never create or delete anything in /dev here: a real device is only
# looked at (and SQLite is kept from opening anything at all), a FIFO is made under tmp_path.
DB_COMMANDS = {
    "tune": ["tune", "matmul:M=8,N=8,K=8", "--trials", "1", "--rpc-tracker", "127.0.0.1:1", "--rpc-key", "k"],
    "measure": ["measure", "matmul:M=8,N=8,K=8", "--repeat", "1", "--no-isolate"],
    "jobs": ["jobs"],
    "leaderboard": ["leaderboard"],
    "db info": ["db", "info"],
    "export": ["export", "matmul:M=8,N=8,K=8", "-o", "{tmp}/bundle", "--no-verify", "--no-layers"],
    "bench": ["bench", "matmul:M=8,N=8,K=8", "--runs", "1"],
    "profile": ["profile", "small_cnn", "--runs", "1"],
    "sweep": ["sweep", "small_cnn", "--batch", "1", "--runs", "1"],
}


def _no_sqlite(monkeypatch) -> None:
    """Whatever a command does, SQLite opens nothing (a regression must not write beside a device)."""
    from store import schema

    def refuse(path, **_):
        raise AssertionError(f"SQLite was asked to open {path}")

    monkeypatch.setattr(schema, "connect", refuse)


@pytest.mark.parametrize("command", sorted(DB_COMMANDS))
@pytest.mark.parametrize("make", ["fifo", "/dev/full", "/dev/zero", "/dev/null"])
def test_every_db_option_refuses_a_fifo_or_a_device_before_sqlite_opens_it(command, make, tmp_path, monkeypatch):
    import stat

    if make == "fifo":
        path = tmp_path / "fifo.db"
        os.mkfifo(path)
        words = "is a FIFO (named pipe), not a database file"
    else:
        if not (os.path.exists(make) and stat.S_ISCHR(os.stat(make).st_mode)):
            pytest.skip(f"no character device {make} here")
        path = Path(make)
        words = "is a character device, not a database file"
    before = {make: {f"{make}{end}" for end in ("-journal", "-wal", "-shm") if os.path.lexists(f"{make}{end}")}}
    _no_sqlite(monkeypatch)
    monkeypatch.chdir(tmp_path)
    args = [a.format(tmp=tmp_path) for a in DB_COMMANDS[command]] + ["--db", str(path)]
    result = CliRunner().invoke(cli, args, obj={})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1, (args, result.output[-2000:])
    assert len(lines) == 1 and lines[0].startswith("Error: Invalid value for '--db': ") and str(path) in lines[0] \
        and words in lines[0] and "--db / SCHEDX_DB" in lines[0], result.output[-2000:]
    if make == "fifo":
        assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.db"]  # no journal, no bundle, nothing
    else:
        after = {f"{make}{end}" for end in ("-journal", "-wal", "-shm") if os.path.lexists(f"{make}{end}")}
        assert after == before[make], f"created beside {make}: {after - before[make]}"


@pytest.mark.parametrize("command", ["tune", "leaderboard", "jobs"])
def test_a_fifo_in_schedx_db_is_refused_the_same_way(command, tmp_path, monkeypatch):
    """SCHEDX_DB is read by click for tune and jobs, by default_db_path for the rest: both checked."""
    path = tmp_path / "fifo.db"
    os.mkfifo(path)
    _no_sqlite(monkeypatch)
    monkeypatch.setenv("SCHEDX_DB", str(path))
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, [a.format(tmp=tmp_path) for a in DB_COMMANDS[command]], obj={})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output[-2000:]
    assert f"{path} is a FIFO (named pipe), not a database file" in lines[0], lines
    assert sorted(p.name for p in tmp_path.iterdir()) == ["fifo.db"]


def test_a_fifo_where_sqlite_keeps_the_journal_is_refused(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "x.db-wal")
    _no_sqlite(monkeypatch)
    result = CliRunner().invoke(cli, ["jobs", "--db", str(tmp_path / "x.db")], obj={})
    assert result.exit_code == 1 and "x.db-wal, where SQLite keeps" in result.output and "a FIFO" in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["x.db-wal"]


@pytest.mark.parametrize("args, words", [
    (["sketches", "matmul:M=8,N=8,K=8", "--target", '{"kind": "llvm", "bogus": 1}'],
     "target key 'bogus' is unknown to TVM's llvm kind; its keys are kind, keys, "),
    (["tune", "matmul:M=8,N=8,K=8", "--rpc-tracker", "host:99999", "--rpc-key", "k", "--db", "t.db"],
     "port 99999 is out of range; a TCP port is 1..65535"),
    (["tune", "matmul:M=8,N=8,K=8", "--rpc-tracker", "127.0.0.1:0", "--rpc-key", "k", "--db", "t.db"],
     "port 0 is out of range"),
], ids=["unknown JSON target key", "tracker port 99999", "tracker port 0"])
def test_bad_input_of_issue_49_is_one_line_naming_it(args, words, tmp_path, monkeypatch):
    """An unknown key in a JSON target was "unexpected ValueError ... (a bug in schedx)"; a tracker
    port out of range was answered with how to start a tracker on port 99999."""
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(cli, args, obj={})
    lines = result.output.strip().splitlines()
    assert result.exit_code == 1 and len(lines) == 1 and lines[0].startswith("Error: "), result.output[-2000:]
    assert words in lines[0] and "bug in schedx" not in lines[0] and "start one" not in lines[0], lines[0]
    assert list(tmp_path.iterdir()) == []

"""``schedx leaderboard`` and ``schedx db ...`` under random arguments: whatever is typed, no
traceback, exit status 0, 1 (an error a user can act on) or 2 (click's own usage errors), and the
database is never damaged."""

from __future__ import annotations

import os

import pytest
from click.testing import CliRunner
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.cli import cli
from store import Store
from tests.store_cases import fill_demo

# what users type, and what a hostile one does: empty, huge, non-ASCII digits, NUL, globs, JSON
TEXT = st.one_of(
    st.text(max_size=40),
    st.sampled_from(["", " ", "0", "-1", "99999999999999999999", "1e400", "２０", "NaN", "*", "[", "?*[",
                     "2020-13-45", "2025-01-01", "2025-01-01T10:00:00Z", '{"kind": "llvm"}', '{"kind": 1}', "llvm",
                     "cuda", "x" * 3000, "\x00", "../../etc/passwd", "%s%s%n", "'; DROP TABLE records; --"]),
)
OPTIONS = {
    "leaderboard": ["--workload", "--target", "--hardware", "--source", "--kind", "--since", "--top"],
    "db export": ["--target", "--hardware"],
}
FLAGS = {"leaderboard": ["--any-hardware", "--verified-only", "--json", "--csv"],
         "db export": ["--any-hardware", "--force", "--json"], "db info": ["--json"], "db merge": ["--json"]}


@pytest.fixture(scope="module")
def demo(tmp_path_factory):
    path = tmp_path_factory.mktemp("fuzz") / "demo.db"
    fill_demo(path, hardware="fuzz/2c")
    return path


@st.composite
def invocations(draw, demo_text: str, folder: str):
    command = draw(st.sampled_from(["leaderboard", "db info", "db export", "db merge"]))
    args = command.split()
    if command == "db export":
        args.append(folder + "/" + draw(st.sampled_from(["out", "out2"])))
    if command == "db merge":
        args.append(draw(st.one_of(TEXT, st.just(demo_text))))
    args += ["--db", draw(st.one_of(st.just(demo_text), TEXT))] if draw(st.booleans()) else ["--db", demo_text]
    for option in draw(st.lists(st.sampled_from(OPTIONS.get(command, ["--json"])), max_size=4)):
        args += [option] if option.startswith("--json") else [option, draw(TEXT)]
    args += draw(st.lists(st.sampled_from(FLAGS[command]), max_size=2, unique=True))
    return args


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_no_argument_gives_a_traceback(demo, tmp_path_factory, data):
    folder = str(tmp_path_factory.getbasetemp() / "fuzz-out")
    args = data.draw(invocations(str(demo), folder))
    scratch = tmp_path_factory.getbasetemp() / "fuzz-cwd"
    scratch.mkdir(exist_ok=True)
    here = os.getcwd()
    os.chdir(scratch)  # a random --db may name a new file: it lands here, never in the project folder
    try:
        result = CliRunner().invoke(cli, args, obj={})
    finally:
        os.chdir(here)
    assert result.exit_code in (0, 1, 2), (args, result.output)
    assert result.exception is None or isinstance(result.exception, SystemExit), (args, repr(result.exception))
    assert "Traceback" not in result.output
    if result.exit_code == 1:
        assert result.output.startswith("Error: "), result.output
        if all(a.isprintable() for a in args):  # (a path with a line break in it is echoed as typed)
            assert len(result.output.strip().splitlines()) == 1, result.output


def test_the_fuzzed_database_is_intact(demo):
    with Store(demo) as store:
        store.check()
        assert store.count() >= 7

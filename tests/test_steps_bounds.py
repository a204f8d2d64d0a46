"""Steps files a careless or hostile user hands over: nested 100 000 deep, binary, bad UTF-8,
huge; each is one StepsFileError (a one-line CLI error), never a RecursionError, a
UnicodeDecodeError or gigabytes of memory."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from click.testing import CliRunner

from app.cli import cli
from explorer.schedule.steps import MAX_STEPS, MAX_STEPS_BYTES, StepsFileError, load_steps, parse_steps

STEP = {"primitive": "split", "args": {"loop": "C/i", "factors": [None, 8]}}


@pytest.mark.parametrize("content, words", [
    (b"[" * 100_000 + b"]" * 100_000, "too deeply"),
    (b'[{"primitive": "split", "args": {"loop": "C/i", "factors": ' + b"[" * 5000 + b"]" * 5000 + b"}}]",
     "too deeply"),
    (bytes(range(256)) * 4, "not UTF-8"),
    (b'[{"primitive": "split\xff"}]', "not UTF-8"),
    (b"\x7fELF\x02\x01\x01\x00" + b"\x00" * 64, "NUL"),
    (b"", "not valid JSON"),
])
def test_malformed_steps_files_are_one_error(tmp_path, content, words):
    path = tmp_path / "steps.json"
    path.write_bytes(content)
    with pytest.raises(StepsFileError, match=words):
        load_steps(path)


def test_too_many_steps_and_too_many_bytes_are_refused_before_parsing(tmp_path):
    with pytest.raises(StepsFileError, match="more than a schedule may have"):
        parse_steps(json.dumps([STEP] * (MAX_STEPS + 1)))
    big = tmp_path / "big.json"
    big.write_bytes(b"[" + b" " * (MAX_STEPS_BYTES + 10) + b"]")
    with pytest.raises(StepsFileError, match="larger than"):
        load_steps(big)
    with pytest.raises(StepsFileError, match="at most"):
        parse_steps(big.read_bytes(), "upload.json")


def test_a_folder_is_not_a_steps_file(tmp_path):
    with pytest.raises(StepsFileError, match="folder"):
        load_steps(tmp_path)


def test_a_65_mb_file_of_1_3m_valid_steps_stays_small(tmp_path):
    """The file that took 7 GB in the UI server's process: refused after reading 4 MB."""
    path = tmp_path / "huge.json"
    with open(path, "w") as f:
        f.write("[" + ",".join([json.dumps(STEP)] * 1_300_000) + "]")
    assert path.stat().st_size > 60 * 2**20
    code = ("import resource, sys\nfrom explorer.schedule.steps import load_steps, StepsFileError\n"
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss\n"
            f"try:\n    load_steps({str(path)!r})\nexcept StepsFileError as e:\n    print('refused', e)\n"
            "print((resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) // 1024)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    lines = out.stdout.strip().splitlines()
    assert lines[0].startswith("refused"), out.stdout + out.stderr
    assert int(lines[-1]) < 64, f"{lines[-1]} MB more to refuse it"


def test_measure_cli_says_one_line(tmp_path):
    path = tmp_path / "deep.json"
    path.write_bytes(b"[" * 100_000)
    r = CliRunner().invoke(cli, ["measure", "matmul:M=8,N=8,K=8", "--steps", str(path)])
    assert r.exit_code == 1 and r.output.startswith("Error: ") and len(r.output.strip().splitlines()) == 1, r.output


@pytest.mark.parametrize("args", [{"loop": "C/i", "factors": [None, 10**30]}, {"loop": "C/i", "factors": [2**31, None]}])
def test_a_factor_no_loop_can_have_is_refused_in_the_users_words(args):
    """Issue 30, probe 7: a split factor of 10**30 reached TVM and came back as its raw
    "Mismatched type on argument #2 ... ffi.BigInt"."""
    with pytest.raises(StepsFileError, match=r"step 0.*'factors' must be a list of 2\+ positive integers up to 2147483647"):
        parse_steps(json.dumps([{"primitive": "split", "args": args}]))

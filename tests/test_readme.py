"""The README's commands, exactly as written (relative paths included), from a scratch working
directory that holds only what the README refers to (assets/steps), on a throw-away database."""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# Long-running commands get a cheaper run of the same command line (their options parse the same)
SERVER = "ui"  # a server: its --help is run instead


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text()
    section = text.split("## Command line", 1)[1].split("\n## ", 1)[0]
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", section, flags=re.S):
        for line in block.splitlines():
            line = shlex.join(shlex.split(line, comments=True))  # a shell drops the comment too
            if line.startswith(".venv/bin/schedx"):
                commands.extend(part.strip() for part in line.split(" '&&' "))
    return commands


def test_the_readme_lists_its_commands():
    commands = readme_commands()
    assert len(commands) >= 15 and all(c.startswith(".venv/bin/schedx ") for c in commands)


@pytest.mark.slow
def test_every_readme_command_works_as_written(tmp_path):
    shutil.copytree(ROOT / "assets" / "steps", tmp_path / "assets" / "steps")
    env = {**os.environ, "SCHEDX_DB": str(tmp_path / "readme.db"), "PYTHONPATH": str(ROOT)}
    for command in readme_commands():
        args = shlex.split(command)[1:]
        if args[0] == SERVER:
            args.append("--help")
        proc = subprocess.run([sys.executable, "-m", "app.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                              text=True, timeout=900)
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-2000:]}\n{proc.stderr[-2000:]}"
        if args[:2] == ["jobs"] or args[-1] == "--background":
            continue
    assert (tmp_path / "bundle" / "lib.so").is_file() and (tmp_path / "sweep.html").is_file()
    assert (tmp_path / "snapshots" / "summary.json").is_file() and (tmp_path / "small_cnn-int8.onnx").is_file()
    jobs = subprocess.run([sys.executable, "-m", "app.cli", "jobs", "--json"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=120)
    import json

    for job in json.loads(jobs.stdout):  # the README's background search: stopped, never left running
        subprocess.run([sys.executable, "-m", "app.cli", "jobs", "stop", str(job["id"])], cwd=tmp_path, env=env,
                       capture_output=True, timeout=120)

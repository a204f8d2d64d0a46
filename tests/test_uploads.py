"""UI uploads: a private per-user, per-process folder (0700), files created without following
links, bounded, removed when the UI process ends. They used to go to a shared, predictable
/tmp/schedx-uploads/<hash>-<name>, written through a planted symlink, never deleted."""

from __future__ import annotations

import hashlib
import os
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

from app import uploads
from app.uploads import UploadError, save_upload

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture
def home(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.delenv("XDG_RUNTIME_DIR", raising=False)
    monkeypatch.setattr(uploads, "_folder", None)
    return tmp_path


def test_uploads_go_to_a_private_folder_never_a_shared_tmp_path(home):
    path = Path(save_upload(b"onnx bytes", "model.onnx"))
    assert path.read_bytes() == b"onnx bytes" and path.name.endswith("-model.onnx")
    assert not str(path).startswith(os.path.join(tempfile.gettempdir(), "schedx-uploads"))
    assert str(path).startswith(str(home / "cache" / "schedx" / "uploads"))
    for folder in (path.parent, path.parent.parent):
        info = os.lstat(folder)
        assert stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and info.st_mode & 0o777 == 0o700
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert save_upload(b"onnx bytes", "model.onnx") == str(path)  # the same content is kept once


def test_a_planted_symlink_is_never_written_through(home, tmp_path):
    folder = uploads.upload_folder()
    victim = tmp_path / "victim.txt"
    victim.write_text("precious")
    data = b"attacker cannot choose where this goes"
    name = f"{hashlib.sha256(data).hexdigest()[:16]}-model.onnx"
    os.symlink(victim, folder / name)
    with pytest.raises(UploadError):
        save_upload(data, "model.onnx")
    assert victim.read_text() == "precious"


def test_a_folder_another_user_could_enter_is_not_used(home):
    base = home / "cache" / "schedx" / "uploads"
    base.mkdir(parents=True)
    os.chmod(base, 0o777)  # someone opened it up: schedx does not trust it
    path = Path(save_upload(b"x", "m.onnx"))
    assert not str(path).startswith(str(base)) and os.lstat(path.parent).st_mode & 0o777 == 0o700


def test_names_are_sanitised_and_sizes_bounded(home, monkeypatch):
    path = Path(save_upload(b"y", "../../etc/pass wd;rm -rf.onnx"))
    assert path.parent == uploads.upload_folder() and "/" not in path.name and " " not in path.name
    monkeypatch.setattr(uploads, "MAX_UPLOAD_BYTES", 10)
    with pytest.raises(UploadError, match="at most"):
        save_upload(b"z" * 11, "big.onnx")


def test_old_files_and_overflow_are_trimmed(home, monkeypatch):
    old = Path(save_upload(b"old", "old.onnx"))
    os.utime(old, (time.time() - 2 * uploads.MAX_AGE_S,) * 2)
    monkeypatch.setattr(uploads, "MAX_FOLDER_BYTES", 8)
    a = Path(save_upload(b"aaaaa", "a.onnx"))
    b = Path(save_upload(b"bbbbb", "b.onnx"))
    assert not old.exists() and not a.exists() and b.exists()


def test_the_folder_goes_when_the_ui_process_ends_and_leftovers_of_killed_ones_too(home):
    env = {**os.environ, "XDG_CACHE_HOME": str(home / "cache")}
    env.pop("XDG_RUNTIME_DIR", None)
    code = "from app.uploads import save_upload; print(save_upload(b'data', 'm.onnx'))"
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    path = Path(out.stdout.strip())
    assert out.returncode == 0 and str(path).startswith(str(home)) and not path.parent.exists()
    # a UI process killed with -9 leaves its folder; the next one removes it
    killed = subprocess.run([sys.executable, "-c", code + "; import os; os._exit(0)"], cwd=ROOT, env=env,
                            capture_output=True, text=True, timeout=120)
    left = Path(killed.stdout.strip()).parent
    assert left.exists()
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert not left.exists()


def test_pages_call_an_upload_by_its_file_name():
    """The Graph & passes caption showed the private upload path and its content hash."""
    from app.uploads import display_name, save_upload

    path = save_upload(b"onnx bytes", "my model.onnx")
    assert display_name(path) == "my_model.onnx"
    assert display_name("/data/models/resnet.onnx") == "resnet.onnx"
    assert display_name("resnet18") == "resnet18" and display_name("example:densenet121") == "example:densenet121"

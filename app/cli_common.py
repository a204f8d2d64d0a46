"""Helpers every CLI module shares: error translation, JSON output, progress bars and the options
several commands take."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import click

from explorer.errors import ExplorerError
from store.errors import StoreError

LIBRARY_ERRORS = (ExplorerError, StoreError)  # one base per room (store cannot import explorer)

_TARGET_LEAD = {"all": "", "searchable": "A target schedx searches: ", "cpu": "A CPU target: ",
                "here": "A CPU target this machine runs: "}


def target_option(default: str | None = "cpu", note: str = "", *, scope: str = "all"):
    """The ``--target`` option every command that builds, measures or runs code takes; its help
    lists the registered spellings of ``scope`` (:func:`explorer.target.spec_help`), then ``note``."""
    from explorer.target import spec_help

    text = f"{_TARGET_LEAD[scope]}{spec_help(scope)}; `schedx targets` lists them." + (f" {note}" if note else "")
    return click.option("--target", "target_spec", default=default, show_default=default is not None, help=text)


def recheck_option():
    """``--recheck``: the in-model decision taken again instead of reused (export.shipping)."""
    return click.option("--recheck", is_flag=True,
                        help="Take the in-model decision again (time the records inside the model against the "
                             "default schedules) instead of reusing the one the database keeps for these records, "
                             "this machine and this precision; the new one replaces it.")


@contextmanager
def progress_bar(label: str) -> Iterator[Callable[[str, float], None]]:
    """A progress bar on stderr fed by a library's ``progress(stage, fraction)`` callback."""
    with click.progressbar(length=100, label=label, file=click.get_text_stream("stderr"),
                           item_show_func=lambda stage: stage) as bar:
        def update(stage: str, fraction: float) -> None:
            bar.update(max(int(fraction * 100) - bar.pos, 0), stage)

        yield update


def fail_cleanly(fn):
    """Turn library errors into ``Error: ...`` and exit 1, unless ``schedx --debug`` was given."""

    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except LIBRARY_ERRORS as err:
            root = click.get_current_context().find_root()
            if isinstance(root.obj, dict) and root.obj.get("debug"):
                raise
            raise click.ClickException(str(err)) from err

    return wrapper


def echo_json(data: object) -> None:
    click.echo(json.dumps(data, indent=2, default=str))

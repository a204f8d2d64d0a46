"""Helpers every CLI module shares: error translation and JSON output."""

from __future__ import annotations

import functools
import json

import click

from explorer.errors import ExplorerError
from store.errors import StoreError

LIBRARY_ERRORS = (ExplorerError, StoreError)  # one base per room (store cannot import explorer)

TARGET_HELP = ("cpu (this machine, from its real features), cpu:MCPU (an LLVM CPU name), cpu:MCPU+feat,-feat, "
               "aarch64[:MCPU], cuda[:sm_XX], or a JSON target; `schedx targets` lists them.")


def target_option(default: str | None = "cpu", help_text: str = TARGET_HELP):
    """The ``--target`` option every command that builds, measures or runs code takes."""
    return click.option("--target", "target_spec", default=default, show_default=default is not None,
                        help=help_text)


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

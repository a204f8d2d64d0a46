"""``schedx keygen``: an ed25519 key pair to sign bundles with (``schedx export --sign``) and to
check them with (``schedx run --trust``, ``python run.py --trust``)."""

from __future__ import annotations

from pathlib import Path

import click


from app.cli_common import echo_json, fail_cleanly
from app.cli_types import FilePath


@click.command()
@click.argument("key", type=FilePath(dir_okay=False, path_type=Path))
@click.option("--json", "as_json", is_flag=True, help="Print the two paths as JSON.")
@fail_cleanly
def keygen(key: Path, as_json: bool) -> None:
    """Write a new ed25519 private key to KEY (mode 0600) and its public key to KEY.pub.

    Sign with the private key (schedx export ... --sign KEY) and hand the public key to whoever
    runs the bundles (schedx run DIR --trust KEY.pub). OpenSSL makes the same pair:
    openssl genpkey -algorithm ed25519 -out KEY && openssl pkey -in KEY -pubout -out KEY.pub"""
    from export.signing import keygen as make_pair

    private, public = make_pair(key)
    if as_json:
        echo_json({"private_key": str(private), "public_key": str(public)})
    else:
        click.echo(f"private key: {private} (keep it secret)\npublic key:  {public} (give it to whoever runs the "
                   f"bundles: schedx run DIR --trust {public})")


__all__ = ["keygen"]

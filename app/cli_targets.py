"""``schedx targets``: what schedx can build for, and what this machine can run."""

from __future__ import annotations

import click

from app.cli_common import echo_json, fail_cleanly


@click.command()
@click.option("--all", "show_all", is_flag=True, help="List every CPU LLVM knows (default: those that run here "
                                                      "and a few common ones).")
@click.option("--json", "as_json", is_flag=True, help="Print JSON.")
@fail_cleanly
def targets(show_all: bool, as_json: bool) -> None:
    """The host target (its CPU name, the features used and those this machine hides), the CPUs
    LLVM knows, cross targets and each registered device kind (CUDA architectures...), each with
    whether this machine runs it."""
    from explorer.target import targets_overview

    data = targets_overview()
    if as_json:
        echo_json(data)
        return
    host = data["host"]
    cpu = host["cpu"]
    click.echo(f"this machine: {cpu['arch']}, LLVM CPU {cpu['llvm_cpu'] or 'generic'}, {cpu['isa']} "
               f"({cpu['vector_width']}-bit vectors), {cpu['cores']} usable cores")
    click.echo(f"  --target cpu  ->  {host['key']}")
    click.echo(f"  ISA features used: {', '.join(cpu['isa_features'])}")
    if cpu["missing"]:
        click.echo(f"  left out (LLVM's {cpu['llvm_cpu']} has them, this machine does not report them): "
                   f"{', '.join(cpu['missing'])}")
    runs = [c for c in data["cpus"] if c.get("runs_here")]
    others = [c for c in data["cpus"] if not c.get("runs_here") and "error" not in c]
    click.echo(f"\nnamed CPUs ({len(runs)} of {len(data['cpus'])} run here; --target cpu:NAME):")
    click.echo("  run here: " + ", ".join(c["cpu"] for c in runs))
    shown = others if show_all else [c for c in others if c["cpu"] in ("x86-64-v4", "skylake-avx512",
                                                                    "sapphirerapids", "znver4", "znver5")]
    for c in shown:
        click.echo(f"  {c['spec']:<28} built only: {c['why_not_here']}")
    if not show_all and len(others) > len(shown):
        click.echo(f"  ... and {len(others) - len(shown)} more that do not run here (--all)")
    for device in data["devices"]:
        rows = device["rows"]
        click.echo(f"\n{device['title']}:")
        blocked = sorted({r["why_not_here"] for r in rows if not r["runs_here"]})
        click.echo(f"  {', '.join(r['spec'] for r in rows)}" + (f"  ({'; '.join(blocked)})" if blocked else ""))
    for c in data["cross"]:
        state = "installed" if c["compiler_installed"] else "not installed (make system installs it)"
        click.echo(f"\n{c['spec']} (--target {c['spec']}[:CPU], cross-compiled with {c['compiler']}, {state}):")
        click.echo("  CPUs: " + ", ".join(c["cpus"][:30]) + (" ..." if len(c["cpus"]) > 30 else ""))

"""The ``schedx`` command line. Each command parses its options, calls the library, prints.

Every error a user can cause is one line on stderr (``Error: ...``) and exit status 1: errors the
libraries raise on purpose (``ExplorerError``, ``StoreError``), and click's own usage errors (an
unknown option, a missing argument), which click alone would print with the usage block and
status 2. ``schedx --debug ...`` shows the traceback instead. Anything else reaching the top is a
bug: one line naming it, status 1. A closed stdout (``schedx leaderboard | head``) ends quietly.
Ctrl-C exits 130 and SIGTERM 143, every command alike: both unwind as exceptions (see
:mod:`explorer.interrupts`), so temporary folders and an export's staging folder go with them.
"""

from __future__ import annotations

import errno
import json
import os
import subprocess
import sys
from pathlib import Path

import click


from app.cli_common import echo_json as _echo_json
from app.cli_common import fail_cleanly as _fail_cleanly
from app.cli_types import Count, FilePath, InputError
from explorer.interrupts import INTERRUPTED, as_interrupt, exit_status, handling_signals
from explorer.temp_dirs import sweep_dead, sweep_own


def one_line(text: str) -> str:
    """A message on one line (a TVM or path message may hold line breaks)."""
    return " ".join(line.strip() for line in str(text).splitlines() if line.strip())


class SchedxGroup(click.Group):
    """The top-level group: runs the command with click in non-standalone mode and reports every
    failure itself (see the module docstring)."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        argv = list(sys.argv[1:] if args is None else args)
        debug = "--debug" in argv[:argv.index("--") if "--" in argv else len(argv)] or \
            os.environ.get("SCHEDX_DEBUG", "").lower() not in ("", "0", "false", "no")
        sweep_dead()  # temp folders of schedx processes that died without cleaning up (one glob)
        try:
            with handling_signals():  # Ctrl-C and SIGTERM unwind: `with` blocks clean up
                rv = super().main(argv, prog_name, complete_var, standalone_mode=False, **extra)
        except KeyboardInterrupt as err:  # SIGTERM too (interrupts.Terminated)
            _interrupted(err)
        except click.Abort as err:
            if as_interrupt(err) is None:  # a prompt answered no
                _fail("aborted")
            _interrupted(err)
        except click.ClickException as err:  # library errors, usage errors, bad values
            if as_interrupt(err) is not None:  # a library error raised by the interrupt's doing
                _interrupted(err)
            if debug and err.__cause__ is not None:
                raise
            hint = ""
            if isinstance(err, click.UsageError) and err.ctx is not None and (
                    isinstance(err, click.MissingParameter) or not isinstance(err, click.BadParameter)):
                hint = f" (see {err.ctx.command_path} --help)"
            _fail(one_line(err.format_message()) + hint)
        except OSError as err:
            if as_interrupt(err) is not None:
                _interrupted(err)
            if err.errno != errno.EPIPE:
                if debug:
                    raise
                _fail(f"{one_line(err.strerror or err)}" + (f": {err.filename}" if err.filename else ""))
            _quiet_pipe()
        except Exception as err:  # noqa: BLE001 - a bug: one line, the traceback with --debug
            if as_interrupt(err) is not None:  # an interrupt TVM turned into a RuntimeError
                _interrupted(err)
            if debug:
                raise
            _fail(f"unexpected {type(err).__name__}: {one_line(err)[:300]} (a bug in schedx: "
                  f"`schedx --debug ...` shows where)")
        sys.exit(rv if isinstance(rv, int) and not isinstance(rv, bool) else 0)


def _fail(message: str) -> None:
    try:
        click.echo(f"Error: {message}", err=True)
    except OSError:
        pass
    sys.exit(1)


def _interrupted(err: BaseException) -> None:
    """Ctrl-C: exit 130; SIGTERM: 143 (what shells and service managers expect). The process's
    temp folders go first: one made just as the signal landed has no ``with`` block to remove it."""
    status = exit_status(err)
    sweep_own()
    try:
        click.echo("interrupted (Ctrl-C)" if status == INTERRUPTED else "terminated (SIGTERM)", err=True)
    except OSError:
        pass
    sys.exit(status)


def _quiet_pipe() -> None:
    """stdout was closed by the reader (``| head``): nothing more to say, and no traceback when
    Python flushes it at exit."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except (OSError, ValueError):
        pass
    sys.exit(1)


@click.group(cls=SchedxGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--debug", is_flag=True, envvar="SCHEDX_DEBUG", help="Show full tracebacks instead of short errors.")
@click.version_option(package_name="schedx")
@click.pass_context
def cli(ctx: click.Context, debug: bool) -> None:
    """schedx: explore how Apache TVM compiles a model: passes, schedules, search, export."""
    ctx.ensure_object(dict)["debug"] = debug


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def models(as_json: bool) -> None:
    """List the built-in zoo and the example models shipped with the onnx package."""
    from explorer.models import ZOO, example_names

    zoo = [m.to_dict() for m in ZOO.values()]
    examples = [{"name": f"example:{n}", "source": "onnx package (backend test data, light)"} for n in example_names()]
    if as_json:
        _echo_json({"zoo": zoo, "examples": examples})
        return
    click.echo("Zoo (seeded weights, built locally):")
    for m in zoo:
        shapes = ", ".join(f"{i['name']} {'x'.join(map(str, i['shape']))}" for i in m["inputs"])
        click.echo(f"  {m['name']:<14} {m['title']:<22} {shapes}")
    click.echo("Examples from the onnx package:")
    click.echo("  " + "  ".join(e["name"] for e in examples))
    click.echo("Any .onnx file works too: schedx passes path/to/model.onnx --shapes input:1x3x224x224")


@cli.command()
@click.option("--json", "as_json", is_flag=True, help="Print JSON instead of a table.")
def pipelines(as_json: bool) -> None:
    """List the named pipelines and the passes a custom pipeline can use."""
    from explorer.passes import PASS_CATALOG, PIPELINES

    if as_json:
        _echo_json({"pipelines": [p.to_dict() for p in PIPELINES.values()],
                    "passes": [p.to_dict() for p in PASS_CATALOG.values()]})
        return
    click.echo("Pipelines (--pipeline NAME):")
    for p in PIPELINES.values():
        click.echo(f"  {p.name:<12} {p.title}")
    click.echo("Passes for a custom pipeline (--passes A,B,C):")
    for p in PASS_CATALOG.values():
        click.echo(f"  {p.name:<26} {p.summary}")


def _human_bytes(n: int | None) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KB", "MB", "GB"):
        if n < 1024:
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return f"{n:.1f} TB"


@cli.command()
@click.argument("model")
@click.option("--pipeline", "pipeline_name", default=None, help="Named pipeline (see `schedx pipelines`); default: inference (what search and export run).")
@click.option("--passes", default=None, help="Comma-separated pass names for a custom pipeline.")
@click.option("--shapes", default=None, help="Input shapes for symbolic dims, e.g. 'input:1x3x224x224' or 'batch=1'.")
@click.option("--out", "out_dir", type=FilePath(file_okay=False, path_type=Path), default=None,
              help="Write one .py (TVMScript) and one .dot file per snapshot, and summary.json, here.")
@click.option("--json", "as_json", is_flag=True, help="Print the summary as JSON.")
@click.option("--all", "show_all", is_flag=True, help="Also list wrapper passes and the passes run inside others.")
@_fail_cleanly
def passes(model: str, pipeline_name: str | None, passes: str | None, shapes: str | None, out_dir: Path | None,
           as_json: bool, show_all: bool) -> None:
    """Run MODEL through a pipeline and report what every pass did.

    MODEL is a zoo name (resnet18), example:NAME, or a path to an .onnx file."""
    from explorer.fault_points import hold
    from explorer.models import load_model
    from explorer.passes import run_pipeline

    if pipeline_name and passes:
        raise click.UsageError("give either --pipeline or --passes, not both")
    loaded = load_model(model, shapes)
    hold("passes.loaded")  # (the signal tests' SIGTERM lands here, not after a quick model has finished)
    run = run_pipeline(loaded.mod, pipeline_name, passes=passes)
    summary = {"model": loaded.info.to_dict(), **run.to_dict()}
    if out_dir is not None:
        _write_snapshots(run, out_dir, summary)
    if as_json:
        _echo_json(summary)
    else:
        _print_pass_table(run, loaded.info.name, show_all)
        if out_dir is not None:
            click.echo(f"wrote {len(run.snapshots) + 1} snapshots to {out_dir}")
    if run.error:
        raise click.ClickException(f"pipeline stopped: {run.error}")


def _print_pass_table(run, model_name: str, show_all: bool) -> None:
    click.echo(f"{model_name} through {run.title}: {len(run.snapshots)} passes in {run.seconds * 1000:.0f} ms")
    click.echo(f"{'#':>3}  {'pass':<34} {'ms':>8}  {'changed':<7} {'calls':>5} {'prim':>4} {'fused':>5} {'activations':>11}")
    shown = run.snapshots if show_all else run.main_passes()
    base = min((s.depth for s in shown), default=1)
    for s in shown:
        name = "  " * (s.depth - base) + s.name
        c = s.counts
        click.echo(f"{s.index:>3}  {name[:34]:<34} {s.seconds * 1000:>8.1f}  {'yes' if s.changed else 'no':<7} "
                   f"{sum(c.calls.values()):>5} {c.prim_funcs:>4} {c.fused_functions:>5} {_human_bytes(c.activation_bytes):>11}")
    if not show_all and len(shown) < len(run.snapshots):
        click.echo(f"({len(run.snapshots) - len(shown)} wrapper or nested passes not listed; --all lists them)")


def _write_snapshots(run, out_dir: Path, summary: dict) -> None:
    from explorer.graph import to_dot

    out_dir.mkdir(parents=True, exist_ok=True)
    items = [(-1, "input")] + [(s.index, s.name) for s in run.snapshots]
    with click.progressbar(items, label="writing snapshots", file=sys.stderr) as bar:
        for index, name in bar:
            stem = f"{index + 1:03d}_{_safe(name)}"
            (out_dir / f"{stem}.py").write_text(run.script(index))
            (out_dir / f"{stem}.dot").write_text(to_dot(run.graph(index), title=f"after {name}"))
    (out_dir / "summary.json").write_text(json.dumps(summary, indent=2, default=str))


def _safe(name: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in name)


def _origins(ctx: click.Context, param: click.Parameter, values: tuple[str, ...]) -> tuple:
    """``--allow-origin`` values as ``ui_guard.Origin``s, a bad one refused in one line."""
    from app.ui_guard import parse_origin

    try:
        return tuple(parse_origin(value) for value in values)
    except ValueError as err:
        raise InputError(str(err), ctx=ctx, param=param) from err


def _check_address(host: str, port: int) -> None:
    """Refuse, in one line, an address the server could not listen on, before Streamlit starts
    (and fails with a traceback): bound the way Streamlit binds it, then let go."""
    import socket

    fix = "give one of this machine's addresses, e.g. 127.0.0.1 (loopback only) or 0.0.0.0 (every interface)"
    if not host.strip() or not host.isprintable():
        raise InputError(f"{host[:60]!r} is not an address: {fix}", param_hint="'--host'")
    try:
        with socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET) as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            sock.bind((host, port))
    except (socket.gaierror, UnicodeError, ValueError) as err:
        raise InputError(f"{host[:60]!r} is not an IP address or a known host name "
                         f"({one_line(getattr(err, 'strerror', None) or err)}): {fix}", param_hint="'--host'") from err
    except OSError as err:
        if err.errno == errno.EADDRINUSE:
            raise click.ClickException(f"port {port} on {host} is already in use (another schedx ui?): stop that "
                                       f"server or pick another port with --port") from err
        if err.errno == errno.EADDRNOTAVAIL:
            raise InputError(f"{host[:60]} is not an address of this machine: {fix}", param_hint="'--host'") from err
        if err.errno == errno.EACCES:
            raise click.ClickException(f"port {port} needs administrator rights: pick one from 1024 up with --port") \
                from err
        raise click.ClickException(f"cannot listen on {host}:{port}: {one_line(err.strerror or err)}") from err


@cli.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to bind (loopback by default).")
@click.option("--port", default=8501, show_default=True, type=Count(1, 65535),
              help="Port to serve on (1-65535).")
@click.option("--allow-origin", "allow_origins", multiple=True, metavar="URL", callback=_origins,
              help="Also answer pages from this origin, e.g. https://ide.example.com (repeatable). Without it "
                   "the UI refuses every request whose Host or Origin is not 127.0.0.1, localhost or [::1] "
                   "with this port (or the address it listens on): no other web site can drive it.")
@click.option("--headless/--browser", default=True, show_default=True, help="Do not open a browser window.")
def ui(host: str, port: int, allow_origins: tuple, headless: bool) -> None:
    """Start the browser UI (Streamlit)."""
    _check_address(host, port)
    entry = Path(__file__).with_name("main.py")
    guard = [arg for origin in allow_origins for arg in ("--allow-origin", str(origin))]
    cmd = [sys.executable, "-m", "app.warm_start", *guard, "run", str(entry), "--server.address", host,
           "--server.port", str(port), "--server.headless", str(headless).lower(),
           "--browser.gatherUsageStats", "false",
           "--client.toolbarMode", "minimal"]  # no "Deploy" button: schedx is not deployed from its own UI
    click.echo(f"schedx UI on http://{host}:{port}", err=True)
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    raise SystemExit(subprocess.call(cmd, env=env))


from app.cli_schedule import kernels as _kernels  # noqa: E402
from app.cli_schedule import measure as _measure  # noqa: E402

cli.add_command(_kernels)
cli.add_command(_measure)

from app.cli_search import jobs as _jobs  # noqa: E402
from app.cli_search import sketches as _sketches  # noqa: E402
from app.cli_search import tune as _tune  # noqa: E402
from app.cli_store import db as _db  # noqa: E402
from app.cli_store import leaderboard as _leaderboard  # noqa: E402

cli.add_command(_sketches)
cli.add_command(_tune)
cli.add_command(_jobs)
cli.add_command(_leaderboard)
cli.add_command(_db)

from app.cli_export import bench as _bench, export as _export, run as _run  # noqa: E402
from app.cli_keys import keygen as _keygen  # noqa: E402

cli.add_command(_export)
cli.add_command(_run)
cli.add_command(_bench)
cli.add_command(_keygen)

from app.cli_models import quantize as _quantize  # noqa: E402

cli.add_command(_quantize)

from app.cli_targets import targets as _targets  # noqa: E402

cli.add_command(_targets)

from app.cli_profile import profile as _profile  # noqa: E402
from app.cli_sweep import sweep as _sweep  # noqa: E402

cli.add_command(_profile)
cli.add_command(_sweep)


def main() -> None:
    import os

    from explorer.target.environment import BIND_THREADS

    os.environ.setdefault(BIND_THREADS, "0")  # kernels this process runs: unpinned TVM workers (see there)
    cli(obj={})


if __name__ == "__main__":
    main()

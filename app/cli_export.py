"""CLI commands of export: ``schedx export``, ``schedx run`` and ``schedx bench``."""

from __future__ import annotations

from pathlib import Path

import click


from app.cli_common import echo_json, fail_cleanly, progress_bar, recheck_option, target_option
from app.cli_types import DbPath, FilePath
from app.cli_precision import INT8_HELP, calibration_of, calibration_options
from explorer.precision import PRECISIONS


@click.command()
@click.argument("workload")
@target_option()
@click.option("-o", "--out", "out_dir", required=True, type=FilePath(file_okay=False, path_type=Path),
              help="Folder for the bundle (created; an earlier bundle there is replaced, files of yours in it "
                   "are kept).")
@click.option("--force", is_flag=True, help="Write the bundle into a non-empty folder that holds no bundle, beside "
                                            "its files (none of them is changed or deleted).")
@click.option("--db", default=None, type=DbPath(),
              help="schedx database to take records from (default: the default database, if any).")
@click.option("--no-db", is_flag=True, help="Use no records: default schedules everywhere.")
@click.option("--hardware", default=None, help="Take records measured on this machine fingerprint "
                                               "(default: this machine for cpu, any machine otherwise).")
@click.option("--shapes", default=None, help="Input shapes for symbolic dims of an ONNX file, e.g. 'input:1x3x224x224'.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads (default: the usable cores).")
@click.option("--no-verify", is_flag=True, help="Skip running the bundle in a fresh process.")
@click.option("--no-layers", is_flag=True, help="Skip the layer-by-layer comparison with ONNX Runtime.")
@click.option("--no-nvcc", is_flag=True, help="CUDA: skip compiling the kernels with nvcc.")
@click.option("--check-in-model/--no-check-in-model", default=None,
              help="Time every record's kernel inside the model against the default schedule's (both builds, "
                   "alternated, three rounds, about a minute on ResNet-18) and keep only the records "
                   "faster there by 2% in the median round. Default: on when records apply and the target "
                   "runs here (an export never ships a record slower than the default in the model). The "
                   "decision is kept in the database and reused until the records chosen, the machine or the "
                   "precision change.")
@recheck_option()
@click.option("--sign", "sign_key", default=None, type=FilePath(dir_okay=False, path_type=Path),
              help="Sign the bundle with this ed25519 private key (manifest.sig; `schedx keygen` makes a pair).")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="bf16: convolutions and matmuls with constant weights in bf16 with fp32 accumulation (needs "
                   "AVX512-BF16 or AMX-BF16), the rest in fp32; verified at the bf16 tolerance the manifest states "
                   "(a bundle that misses it is built again with every matmul in fp32, said in its warnings). "
                   f"{INT8_HELP}; verified against ONNX Runtime running the int8 model, the quantizer's own "
                   "figures against the float model said beside it.")
@calibration_options
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_cleanly
def export(workload: str, target_spec: str, out_dir: Path, db: str | None, no_db: bool, hardware: str | None,
           shapes: str | None, threads: int | None, no_verify: bool, no_layers: bool, no_nvcc: bool,
           check_in_model: bool | None, recheck: bool, sign_key: Path | None, force: bool, precision: str,
           calibrate: int, data_file: Path | None, as_json: bool) -> None:
    """Export WORKLOAD as a library a plain TVM runtime loads, with the best records applied.

    WORKLOAD is a model (small_cnn, resnet18, example:NAME, model.onnx) or a kernel
    (matmul:M=256,N=256,K=256). Exits 1 when a verification fails."""
    from export.entry import ExportSpec, run_export

    spec = ExportSpec(workload=workload, out_dir=out_dir, target=target_spec, shapes=shapes, use_records=not no_db,
                      db=db, hardware=hardware, check_in_model=check_in_model, recheck=recheck, threads=threads,
                      verify=not no_verify, layers=not no_layers, nvcc=not no_nvcc, sign_key=sign_key, force=force,
                      precision=precision, calibration=calibration_of(precision, calibrate, data_file))
    with progress_bar(f"exporting {workload}") as progress:
        result = run_export(spec, progress=progress)
    report = result.report
    if result.signature is not None:
        click.echo(f"signed: {result.signature} (check with: schedx run {report.folder} --trust PUBKEY)", err=True)
    if as_json:
        echo_json({**report.to_dict(), "in_model": result.shipped.decision.to_dict()
                   if result.shipped.decision is not None else None})
    else:
        _print_export(report)
        if result.shipped.decision is not None:
            click.echo(f"  {result.shipped.summary()}")
    if not report.ok:
        raise SystemExit(1)


def _print_export(report) -> None:
    m = report.manifest
    tasks = m["tasks"]
    from_records = sum(1 for t in tasks if t["schedule"] == "record")
    click.echo(f"{m['workload']['name']} for {m['target']['label']} -> {report.folder}  "
               f"(built in {report.seconds['build']:.1f} s, {report.seconds['total']:.1f} s in all)")
    click.echo(f"  kernels: {len(tasks)}, {from_records} from records"
               + (f" (records {', '.join(str(r) for r in m['records'].values())})" if m["records"] else ""))
    quantization = (m.get("precision") or {}).get("quantization")
    if quantization:  # int8: what quantizing cost, beside the verdict on the build (against the int8 model)
        from explorer.models.int8_precision import summary

        click.echo(f"  precision: int8, {summary(quantization)}; the verdict below is against ONNX Runtime running "
                   f"the int8 model")
    if m.get("computed_in") == "float16":
        click.echo("  computed in: float16, as the model is written (its float16 weights and casts kept; "
                   "judged by float16's tolerance)")
    for w in report.warnings:
        click.echo(f"  warning: {w}")
    if report.verification is not None:
        click.echo(f"  verify: {report.verification.summary()}")
    if report.layers is not None:
        click.echo(f"  layers: {report.layers.summary()}")
    if report.cuda is not None:
        click.echo(f"  cuda: {report.cuda.summary()}")
    if report.elf is not None:
        click.echo(f"  library: {report.elf.summary()}")
        if report.elf.ok:
            click.echo(f"  on the device: copy {report.folder.name}/ there and run `python run.py`, or serve it with "
                       f"`python -m tvm.exec.rpc_server --host 127.0.0.1` and load lib.so through TVM RPC over "
                       f"an SSH tunnel")
    click.echo(f"  verdict: {report.verdict}")
    files = ", ".join(f"{name} {entry['bytes'] / 1024:.0f} KB" for name, entry in m["files"].items())
    click.echo(f"  files: {files}")


@click.command(name="run")
@click.argument("bundle", type=FilePath(path_type=Path))
@click.option("--runs", default=50, show_default=True, type=click.IntRange(1, 10000), help="Timed runs after the first.")
@click.option("--budget", default=20.0, show_default=True, help="Stop timing a contender after this many seconds.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads (default: the usable cores).")
@click.option("--no-baselines", is_flag=True, help="Time the bundle only (no ONNX Runtime).")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Rounds the bundle and ONNX Runtime alternate in (the runs are shared out among them).")
@target_option(None, "Refuse the bundle unless it was built for this target (default: whatever it was built "
                     "for, if this machine can run it).")
@click.option("--trust", "trust_key", default=None, type=FilePath(dir_okay=False, path_type=Path),
              help="Refuse the bundle unless its manifest.sig verifies with this ed25519 public key.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_cleanly
def run(bundle: Path, runs: int, budget: float, threads: int | None, no_baselines: bool, rounds: int,
        target_spec: str | None, trust_key: Path | None, as_json: bool) -> None:
    """Check, load and run a BUNDLE folder in a fresh process: compile time, first inference,
    steady-state median and p90, beside ONNX Runtime on the same input and threads.

    A bundle whose files no longer match its manifest is refused before anything is loaded, and
    so is one built for a CPU or GPU this machine does not have. The manifest's hashes catch
    accidents; with --trust, only a bundle signed by the matching private key runs."""
    from contextlib import nullcontext

    from export.trusted_copy import trusted_copy

    # with --trust, everything from here on reads a private copy whose signature and hashes were checked
    with trusted_copy(bundle, trust_key) if trust_key is not None else nullcontext(bundle) as checked:
        _run(checked, bundle, runs, budget, threads, no_baselines, rounds, target_spec, as_json)


def _run(bundle: Path, shown: Path, runs: int, budget: float, threads: int | None, no_baselines: bool, rounds: int,
         target_spec: str | None, as_json: bool) -> None:
    """``run`` on the folder ``bundle`` (the checked copy under --trust), named ``shown`` to the user."""
    from explorer.target import TargetError, parse_target
    from export.bench import bench_bundle, bundle_target
    from export.bundle import read_manifest

    if target_spec is not None:
        wanted, built_for = parse_target(target_spec), bundle_target(read_manifest(bundle))
        if not wanted.accepts(built_for.key):
            raise TargetError(f"{shown} was built for {built_for.label}, not {wanted.label}")
    with progress_bar(f"running {shown}") as progress:
        progress("timing", 0.1)
        report = bench_bundle(bundle, threads=threads, runs=runs, budget_s=budget, baselines=not no_baselines,
                              rounds=rounds)
        progress("done", 1.0)
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.table())
    if report.check and not report.check["verified"]:
        raise SystemExit(1)


@click.command()
@click.argument("workload")
@click.option("--db", default=None, type=DbPath(),
              help="schedx database with records (default: the default database, if any).")
@click.option("--no-db", is_flag=True, help="No records: time the untuned build and the baselines only.")
@click.option("--shapes", default=None, help="Input shapes for symbolic dims of an ONNX file.")
@click.option("--runs", default=50, show_default=True, type=click.IntRange(1, 10000), help="Timed runs after the first.")
@click.option("--budget", default=20.0, show_default=True, help="Stop timing a contender after this many seconds.")
@click.option("--threads", type=click.IntRange(1, 1024), default=None, help="CPU threads (default: the usable cores).")
@click.option("--rounds", default=3, show_default=True, type=click.IntRange(1, 100),
              help="Rounds the contenders alternate in (the runs are shared out among them).")
@click.option("--check-in-model/--no-check-in-model", default=True, show_default=True,
              help="Use only the records that beat the default inside the model, as `schedx export` ships them "
                   "(the decision the database keeps for these records and this machine, else one taken now).")
@recheck_option()
@target_option(scope="here")
@click.option("--precision", type=click.Choice(PRECISIONS), default="fp32", show_default=True,
              help="bf16: add a row with the default build's convolutions and weight products in bf16 (fp32 "
                   f"accumulation). {INT8_HELP}: adds its default build's row and ONNX Runtime running the int8 "
                   "model.")
@calibration_options
@click.option("--busy", default=0, show_default=True, type=click.IntRange(0, 64),
              help="Time beside this many busy processes (`while True: pass`) that the benchmark starts and stops: "
                   "latency on a machine where other work runs.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
@fail_cleanly
def bench(workload: str, db: str | None, no_db: bool, shapes: str | None, runs: int, budget: float,
          threads: int | None, rounds: int, check_in_model: bool, recheck: bool, target_spec: str, precision: str,
          calibrate: int, data_file: Path | None, busy: int, as_json: bool) -> None:
    """Time WORKLOAD on this CPU: TVM with the database's records, TVM untuned, ONNX Runtime
    (and PyTorch when the model came from it), and OpenVINO f32 and at its default precision
    (bf16 on AMX / AVX512-BF16 CPUs; where it is installed), side by side, on the same input and threads.

    The contenders run in alternated rounds; each median comes with its 95% confidence interval,
    and each pair of rows is called faster, slower, or no different beyond the noise. OpenVINO's
    rows state their outputs' error against ONNX Runtime (fp32 unless the model is quantized) by the
    rule schedx verifies its own builds of the model with (within or over schedx's bound for that
    precision, and why)."""
    from export.entry import BenchSpec, run_bench

    spec = BenchSpec(workload=workload, target=target_spec, shapes=shapes, use_records=not no_db, db=db,
                     check_in_model=check_in_model, recheck=recheck, threads=threads, runs=runs, budget_s=budget,
                     rounds=rounds, precision=precision, busy=busy,
                     calibration=calibration_of(precision, calibrate, data_file))
    with progress_bar(f"benchmarking {workload}") as progress:
        report = run_bench(spec, progress=progress).report
    if as_json:
        echo_json(report.to_dict())
    else:
        click.echo(report.table())


__all__ = ["bench", "export", "run"]

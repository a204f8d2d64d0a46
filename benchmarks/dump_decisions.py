"""Dump every task's default-schedule decision, per model and target, as sorted JSON: run it before
and after a change to the default rules (or a move of their code) and diff the two folders.

Run: ``python -m benchmarks.dump_decisions --out DIR [--target cpu:sapphirerapids ...] [--variants 3]
[SPEC ...]``. Without specs: the built-in kernels, the zoo, the ONNX package's example models and every
corpus and outside file found in their cache folders (``make corpus``, ``make outside``). One file per
target (``DIR/<target>.json``: ``{spec: {kernel: decision}}``) from
:func:`explorer.schedule.defaults.dump.workload_decisions`; targets are built from flags (``cpu:MCPU``),
never from this host, so two machines dump the same thing. A spec that does not load is listed with
its error. ``diff -r BEFORE AFTER`` shows what changed.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
import time
from pathlib import Path

# AVX-512 with VNNI, AMX and bf16; AVX2 without VNNI: the two x86 families the rules size for
TARGETS = ("cpu:sapphirerapids", "cpu:znver3")
CORES = 4


def default_specs() -> list[str]:
    """The built-in kernels, the zoo, the example models, and the corpus/outside files present."""
    from benchmarks.corpus.build import corpus_dir
    from explorer.kernels import BUILTINS
    from explorer.models.examples import example_names
    from explorer.models.zoo import zoo_names

    files = [str(p) for which in ("corpus", "outside") if corpus_dir(which=which).is_dir()
             for p in sorted(corpus_dir(which=which).glob("*.onnx"))]
    return list(BUILTINS) + zoo_names() + [f"example:{n}" for n in example_names()] + files


def _file_name(target: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", target) + ".json"


def dump(specs: list[str], target_text: str, variants: int) -> dict:
    from explorer.schedule.defaults.dump import workload_decisions
    from explorer.target import parse_target

    target = parse_target(target_text, cores=CORES)
    table: dict = {}
    for spec in specs:
        start = time.perf_counter()
        try:
            table[spec] = workload_decisions(spec, target, variants=variants)
        except Exception as err:  # noqa: BLE001 - one model that does not load must not lose the others
            table[spec] = {"error": f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"[:300]}
        sys.stderr.write(f"{target_text} {spec}: {len(table[spec])} kernels, {time.perf_counter() - start:.1f} s\n")
    return dict(sorted(table.items()))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("specs", nargs="*", help="workloads (default: kernels, zoo, examples, corpus files found)")
    ap.add_argument("--out", required=True, help="folder for one JSON file per target")
    ap.add_argument("--target", action="append", help=f"a target (repeatable; default: {', '.join(TARGETS)})")
    ap.add_argument("--variants", type=int, default=0, help="also up to N variants of the CPU rules per kernel")
    args = ap.parse_args(argv)
    specs = args.specs or default_specs()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for target in args.target or TARGETS:
        table = dump(specs, target, args.variants)
        (out / _file_name(target)).write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

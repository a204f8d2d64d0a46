"""A bundle's ``run.py``, importable from schedx: check, load, run and verify an exported bundle.

The code lives in :mod:`export.runner` (one module per part: the manifest and hashes, a CUDA
bundle's kernels, the one rule that compares outputs, running, the command line), joined into
each bundle's self-contained ``run.py`` at export time (:func:`export.runner.source.runner_source`).
This module gathers their names for schedx's own callers, and runs like ``run.py``::

    python -m export.verify_bundle BUNDLE_DIR --out outputs.npz
"""

from __future__ import annotations

import sys

from export.runner.bundle_check import (FORMAT, FORMAT_VERSION, MANIFEST, SIGNATURE, BundleCheckError, check_bundle,
                                        check_nothing_unlisted, check_signature, file_with_role, sha256_file)
from export.runner.cli import main
from export.runner.compare import (ACTIVATION_STEPS, ACTIVATIONS, TOLERANCES, compare_output, compare_outputs,
                                   describe_worst, tolerances)
from export.runner.cuda_code import cuda_code_loader, cuda_compile_mode, load_cuda_runtime
from export.runner.running import profile_calls, run_bundle
from export.runner.threads import SPIN_COUNT, thread_environment, usable_cores

__all__ = ["ACTIVATIONS", "ACTIVATION_STEPS", "FORMAT", "FORMAT_VERSION", "MANIFEST", "SIGNATURE", "TOLERANCES",
           "BundleCheckError", "check_bundle", "check_nothing_unlisted", "check_signature", "compare_output",
           "compare_outputs", "cuda_code_loader", "cuda_compile_mode", "describe_worst", "file_with_role", "load_cuda_runtime",
           "main", "profile_calls", "run_bundle", "sha256_file", "SPIN_COUNT", "thread_environment", "tolerances",
           "usable_cores"]

if __name__ == "__main__":
    sys.exit(main())

"""Load and run an exported schedx bundle with nothing but apache-tvm and numpy.

Every bundle carries this as ``run.py`` (the modules of :mod:`export.runner`, joined into one file by
:func:`export.runner.source.runner_source` at export time), so a clean Python with only
``apache-tvm`` installed can check and run a bundle (the runtime alone does: a runtime-only TVM,
or ``TVM_USE_RUNTIME_LIB=1``, loads the library and runs it through ``tvm.runtime.vm``)::

    python run.py                      # check hashes, load, run inputs.npz, compare with reference.npz
    python run.py --runs 50 --json     # also time 50 runs after the first one
    python -m export.verify_bundle BUNDLE_DIR --out outputs.npz   # the same, from schedx

Before anything is loaded every file listed in ``manifest.json`` is hashed; a missing or changed
file stops the run with a message naming it. That catches accidents (a truncated copy, a file
swapped by mistake, a damaged disk), not an attacker, who can rewrite the manifest too. A signed
bundle (``schedx export --sign KEY``) also carries ``manifest.sig``, an ed25519 signature of the
manifest's bytes; ``python run.py --trust PUBKEY.pem`` (``schedx run --trust``) refuses the bundle
unless that signature verifies with the given public key, so no file can change without the
private key. Checking a signature needs the ``cryptography`` package; nothing else here does.

The parts, in the order they are joined: :mod:`.bundle_check` (the manifest, hashes, signature),
:mod:`.cuda_code` (a CUDA bundle's kernels), :mod:`.compare` (the one rule that compares outputs),
:mod:`.threads` (TVM's thread pool), :mod:`.running` (load, run, time, profile), :mod:`.cli` (the command line). Keep them free of
schedx imports but each other's (one line each, ``from export.runner.X import ...``, dropped when
joined): run.py must run where schedx is not installed (``foreign_modules`` in the report lists
any that got loaded). This package's ``__init__`` imports nothing.
"""

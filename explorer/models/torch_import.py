"""Import a PyTorch ``nn.Module`` through ``torch.export`` into Relax (needs the ``torch`` extra)."""

from __future__ import annotations

from collections.abc import Sequence

from explorer.errors import ModelLoadError, short_tvm_message
from explorer.models.quiet import captured_output
from explorer.models.source import LoadedModel, ModelInfo


def import_torch(module: object, example_inputs: Sequence[object], *, name: str | None = None) -> LoadedModel:
    """Export ``module`` on ``example_inputs`` (tensors) and convert the exported program.

    The module is put in eval mode; its weights become constants of the Relax module."""
    try:
        import torch
    except ImportError as err:
        raise ModelLoadError("the PyTorch route needs torch: pip install 'schedx[torch]'") from err
    from tvm.relax.frontend.torch import from_exported_program

    from explorer.models.onnx_import import _outputs

    if not isinstance(module, torch.nn.Module):
        raise ModelLoadError(f"expected a torch.nn.Module, got {type(module).__name__}")
    args = tuple(example_inputs)
    module = module.train(False)  # inference mode
    try:
        with torch.no_grad():
            exported = torch.export.export(module, args)
    except Exception as err:
        raise ModelLoadError(f"torch.export could not trace {type(module).__name__}: {short_tvm_message(err)}") from err
    try:
        with captured_output() as printed:  # nothing the importer prints may reach stdout
            mod = from_exported_program(exported, keep_params_as_input=False)
    except Exception as err:
        raise ModelLoadError(f"TVM could not import {type(module).__name__}: {short_tvm_message(err)}") from err
    params = mod["main"].params
    inputs = tuple(
        (p.name, tuple(int(d) for d in a.shape), str(a.dtype).replace("torch.", ""))
        for p, a in zip(params, args)
    )
    info = ModelInfo(name=name or type(module).__name__, origin="torch", inputs=inputs, outputs=_outputs(mod),
                     source=f"{type(module).__module__}.{type(module).__qualname__}", import_log=tuple(printed.lines))
    return LoadedModel(info=info, mod=mod)

"""Default schedules: what a kernel without a record gets instead of a naive loop nest, every
rule in this package, one question per module.

- CPU (:mod:`.apply`: the order rules are tried in, as rows of :class:`.variant.DefaultVariant`):
  cheap blocks inlined (:mod:`.inline`), the biggest reduction register-tiled with its epilogue
  (:mod:`.tiling` and the modules it names, :mod:`.layouts`, :mod:`.groups`), an int8 kernel
  around the CPU's dot-product instruction (:mod:`.int8`), a bf16 one around its bf16 instruction
  (:mod:`.bf16`), every other block parallel and vectorized (:mod:`.simple`), sized from
  :class:`.machine.CpuSpec`; the variants a search measures beside the default (:mod:`.variants`).
- a recurrent layer's kernel (LSTM/GRU/RNN steps), written for the target before any rule is
  tried (:mod:`.recurrence`; its spec in :mod:`.recurrence_spec`);
- GPU: dlight's rules kernel by kernel (:mod:`.gpu`).
- every kernel's decision as plain data, to compare before and after a change (:mod:`.dump`);
  the kernels whose rule failed and fell to a simpler one, as a build's warnings (:mod:`.fallbacks`).

Tensor intrinsics the rules and the search tile around stay beside the schedule primitives
(``explorer/schedule/int8_dot.py``, ``bf16_dot.py``, ``microkernel.py``). Names load on first use:
importing a module of this package (a recurrence spec, say) does not import every rule.
"""

from store.lazy import lazy_names

__getattr__ = lazy_names(__name__, {"CpuSpec": "machine", "DefaultChoice": "apply",
                                    "apply_default_schedules": "apply", "default_schedule": "apply",
                                    "DefaultVariant": "variant", "fallback_notes": "fallbacks",
                                    "untiled_kernels": "fallbacks"})

__all__ = ["CpuSpec", "DefaultChoice", "DefaultVariant", "apply_default_schedules", "default_schedule",
           "fallback_notes", "untiled_kernels"]

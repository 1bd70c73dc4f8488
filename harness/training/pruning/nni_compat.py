"""Make NNI 3.0's ModelSpeedup run on current PyTorch.

NNI 3.0 (2023) is the last release and predates two PyTorch changes that break its
concrete tracer, which ModelSpeedup uses to find what a pruned filter feeds:

1. A few torch functions now have ``__module__ = None``. The tracer wraps every entry of
   ``ConcreteTracer.default_autowrap_leaf_function`` and calls ``func.__module__.startswith``,
   which raises ``AttributeError: 'NoneType' object has no attribute 'startswith'``.
   Those functions cannot be located by module anyway, so they are dropped from the table.
2. ``torch.fx.Node.is_impure`` gained an argument (``impure_random``). NNI patches it with a
   one-argument wrapper, so dead-code elimination fails with ``TypeError``. The replacement
   accepts and ignores the extra arguments; NNI's purity rules are unchanged.

``apply()`` is idempotent and only touches NNI's own objects.
"""

from __future__ import annotations

import functools

_applied = False


def apply() -> list[str]:
    """Patch NNI in place; return the names of the leaf functions that were dropped."""
    global _applied
    from nni.common.concrete_trace_utils import concrete_tracer

    table = concrete_tracer.ConcreteTracer.default_autowrap_leaf_function
    moduleless = [func for func in table if _needs_module(func) and getattr(func, "__module__", "") is None]
    for func in moduleless:
        del table[func]

    if not _applied:
        original = concrete_tracer.node_is_impure_wrapper

        @functools.wraps(original)
        def node_is_impure_any_signature(node, *_ignored, **_ignored_kw):
            return original(node)

        concrete_tracer.node_is_impure_wrapper = node_is_impure_any_signature
        _applied = True
    return [getattr(f, "__qualname__", repr(f)) for f in moduleless]


def _needs_module(func) -> bool:
    # The tracer only reads __module__ for plain functions and methods; entries such as
    # len/isinstance that NNI maps by identity are left alone.
    return callable(func) and hasattr(func, "__qualname__")

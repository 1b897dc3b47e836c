"""The layout part of a choice, checked: parallel degrees, the layer split and the
tensor-parallel scheme of every stage."""

from __future__ import annotations

from typing import Any

from wafopt.core.errors import InstanceError
from wafopt.costmodel.operators import SCHEMES


def split_layers(layers: int, pp: int) -> list[int]:
    """Layers per stage, as even as possible; the first `layers % pp` stages get one more."""
    base, extra = divmod(layers, pp)
    return [base + (1 if i < extra else 0) for i in range(pp)]


def check_split(split, layers: int, pp: int) -> list[int]:
    """A plan's `layers: [n_0, ..., n_{pp-1}]`: pp positive integers summing to the model's layers
    (InstanceError naming the field otherwise)."""
    if (not isinstance(split, (list, tuple)) or len(split) != pp
            or any(not isinstance(n, int) or isinstance(n, bool) or n < 1 for n in split)):
        raise InstanceError(f"must be a list of pp = {pp} positive integers, got {split!r:.60}", "layers")
    if sum(split) != layers:
        raise InstanceError(f"must sum to the model's {layers} layers, got {sum(split)}", "layers")
    return list(split)


def check_degree(value: Any, name: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
        raise InstanceError(f"must be a positive integer, got {value!r}", name)
    return value


def stage_schemes(schemes, pp: int) -> tuple[str, ...]:
    """None, one scheme for all stages, or one per stage -> a tuple of pp schemes."""
    if schemes is None:
        return ("megatron",) * pp
    if isinstance(schemes, str):
        schemes = [schemes] * pp
    schemes = tuple(schemes)
    if len(schemes) != pp or any(s not in SCHEMES for s in schemes):
        raise InstanceError(f"must be one of {', '.join(SCHEMES)} or a list of {pp} of them, got "
                            f"{list(schemes)!r:.80}", "tp_scheme")
    return schemes

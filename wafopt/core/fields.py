"""Reading mappings from instance files with precise errors (field path and value).

The problems' constructors read their already validated documents (wafopt.core.schema) with it,
and the catalog and the cost model read wafer, LLM and training mappings with it: presets merge
with overrides there and those fields are defined in one place, next to the code that uses them.
Every number it accepts is finite and bounded (wafopt.core.limits), like the schemas'.
"""

from __future__ import annotations

import math
from typing import Any

from wafopt.core.errors import InstanceError
from wafopt.core.files import excerpt, field_path
from wafopt.core.limits import MAX_AMOUNT, MAX_COUNT

_REQUIRED = object()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Fields:
    """Takes the keys of one mapping one by one; `finish()` rejects any key not taken."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise InstanceError(f"expected a mapping, got {type(data).__name__} {excerpt(data)}", where)
        self.data = data
        self.where = where
        self.taken: set[str] = set()

    def path(self, key: str) -> str:
        return f"{self.where}.{key}" if self.where else key

    def has(self, key: str) -> bool:
        return key in self.data

    def raw(self, key: str, default: Any = _REQUIRED) -> Any:
        self.taken.add(key)
        if key not in self.data or self.data[key] is None:
            if default is _REQUIRED:
                raise InstanceError("missing required field", self.path(key))
            return default
        return self.data[key]

    def number(self, key: str, default: Any = _REQUIRED, *, positive: bool = False,
               nonnegative: bool = False, minimum: float | None = None,
               maximum: float = MAX_AMOUNT) -> float:
        """A finite number with |value| <= maximum (and >= minimum)."""
        value = self.raw(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if not _is_number(value):
            raise InstanceError(f"must be a finite number, got {excerpt(value)}", self.path(key))
        if positive and not value > 0:
            raise InstanceError(f"must be positive, got {value!r}", self.path(key))
        if nonnegative and value < 0:
            raise InstanceError(f"must be >= 0, got {value!r}", self.path(key))
        if minimum is not None and value < minimum:
            raise InstanceError(f"must be >= {minimum:g} (limit), got {value!r}", self.path(key))
        if abs(value) > maximum:
            raise InstanceError(f"must be <= {maximum:g} (limit), got {value!r}", self.path(key))
        return float(value)

    def integer(self, key: str, default: Any = _REQUIRED, *, positive: bool = False,
                nonnegative: bool = False, maximum: int = MAX_COUNT) -> int:
        """An integer (8.0 and 8e0 read as 8; true and "8" do not) with |value| <= maximum."""
        value = self.raw(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InstanceError(f"must be an integer, got {excerpt(value)}", self.path(key))
        if positive and value <= 0:
            raise InstanceError(f"must be a positive integer, got {value!r}", self.path(key))
        if nonnegative and value < 0:
            raise InstanceError(f"must be >= 0, got {value!r}", self.path(key))
        if abs(value) > maximum:
            raise InstanceError(f"must be <= {maximum:,} (limit), got {excerpt(value)}", self.path(key))
        return value

    def boolean(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise InstanceError(f"must be true or false, got {excerpt(value)}", self.path(key))
        return value

    def string(self, key: str, default: Any = _REQUIRED, *, choices: tuple[str, ...] | None = None) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise InstanceError(f"must be a string, got {excerpt(value)}", self.path(key))
        if choices is not None and value not in choices:
            raise InstanceError(f"must be one of {', '.join(choices)}; got {excerpt(value)}", self.path(key))
        return value

    def list(self, key: str, default: Any = _REQUIRED) -> list:
        value = self.raw(key, default)
        if not isinstance(value, list):
            raise InstanceError(f"must be a list, got {excerpt(value)}", self.path(key))
        return value

    def mapping(self, key: str, default: Any = _REQUIRED) -> "Fields":
        return Fields(self.raw(key, default), self.path(key))

    def finish(self) -> None:
        unknown = [k for k in self.data if k not in self.taken]
        if unknown:
            allowed = ", ".join(sorted(self.taken))
            raise InstanceError(f"unknown key {excerpt(unknown[0])} (allowed: {allowed})",
                                self.path(field_path([str(unknown[0])])))

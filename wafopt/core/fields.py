"""Reading mappings from instance files with precise errors (field path and value)."""

from __future__ import annotations

import math
from typing import Any

from wafopt.core.errors import InstanceError

_REQUIRED = object()


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


class Fields:
    """Takes the keys of one mapping one by one; `finish()` rejects any key not taken."""

    def __init__(self, data: Any, where: str):
        if not isinstance(data, dict):
            raise InstanceError(f"expected a mapping, got {type(data).__name__} {data!r:.60}", where)
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
               nonnegative: bool = False) -> float:
        value = self.raw(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if not _is_number(value):
            raise InstanceError(f"must be a number, got {value!r}", self.path(key))
        if positive and not value > 0:
            raise InstanceError(f"must be positive, got {value!r}", self.path(key))
        if nonnegative and value < 0:
            raise InstanceError(f"must be >= 0, got {value!r}", self.path(key))
        return float(value)

    def integer(self, key: str, default: Any = _REQUIRED, *, positive: bool = False,
                nonnegative: bool = False) -> int:
        value = self.raw(key, default)
        if value is default and default is not _REQUIRED:
            return value
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        if not isinstance(value, int) or isinstance(value, bool):
            raise InstanceError(f"must be an integer, got {value!r}", self.path(key))
        if positive and value <= 0:
            raise InstanceError(f"must be a positive integer, got {value!r}", self.path(key))
        if nonnegative and value < 0:
            raise InstanceError(f"must be >= 0, got {value!r}", self.path(key))
        return value

    def boolean(self, key: str, default: Any = _REQUIRED) -> bool:
        value = self.raw(key, default)
        if not isinstance(value, bool):
            raise InstanceError(f"must be true or false, got {value!r}", self.path(key))
        return value

    def string(self, key: str, default: Any = _REQUIRED, *, choices: tuple[str, ...] | None = None) -> str:
        value = self.raw(key, default)
        if not isinstance(value, str):
            raise InstanceError(f"must be a string, got {value!r}", self.path(key))
        if choices is not None and value not in choices:
            raise InstanceError(f"must be one of {', '.join(choices)}; got {value!r}", self.path(key))
        return value

    def list(self, key: str, default: Any = _REQUIRED) -> list:
        value = self.raw(key, default)
        if not isinstance(value, list):
            raise InstanceError(f"must be a list, got {value!r:.60}", self.path(key))
        return value

    def mapping(self, key: str, default: Any = _REQUIRED) -> "Fields":
        return Fields(self.raw(key, default), self.path(key))

    def finish(self) -> None:
        unknown = [k for k in self.data if k not in self.taken]
        if unknown:
            allowed = ", ".join(sorted(self.taken))
            raise InstanceError(f"unknown key {unknown[0]!r} (allowed: {allowed})",
                                self.path(str(unknown[0])))

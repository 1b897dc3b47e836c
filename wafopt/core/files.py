"""Reading instance and plan files: YAML or JSON into a plain mapping, with the file's sha256.

Files are untrusted. Hostile-input limits are enforced here, before any schema sees the data
(see wafopt.core.limits).
"""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

import yaml

from wafopt.core.errors import InstanceError


class _YamlLoader(yaml.SafeLoader):
    """SafeLoader that also reads 1e9 and 2E-3 as numbers (YAML 1.1 wants a dot: 1.0e9)."""


_YamlLoader.add_implicit_resolver(
    "tag:yaml.org,2002:float", re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def parse_text(raw: bytes, kind: str, where: str):
    """Bytes of a YAML or JSON document -> Python data."""
    text = raw.decode("utf-8", errors="replace")
    try:
        return json.loads(text) if kind == "json" else yaml.load(text, Loader=_YamlLoader)
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        mark = getattr(exc, "problem_mark", None)
        at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise InstanceError(f"malformed {kind.upper()}{at}: {reason}", where) from None


def read_mapping(path: str | Path) -> tuple[dict, str]:
    """Read a YAML or JSON file into a mapping; returns it with the file's sha256."""
    p = Path(path)
    try:
        raw = p.read_bytes()
    except FileNotFoundError:
        raise InstanceError("no such file", str(path)) from None
    except IsADirectoryError:
        raise InstanceError("is a directory, not an instance file", str(path)) from None
    except OSError as exc:
        raise InstanceError(f"cannot read: {exc.strerror}", str(path)) from None
    digest = hashlib.sha256(raw).hexdigest()
    data = parse_text(raw, "json" if p.suffix == ".json" else "yaml", str(path))
    if not isinstance(data, dict):
        raise InstanceError(f"expected a mapping with a 'problem:' key at the top, got {type(data).__name__}",
                            str(path))
    return data, digest


def display_path(path: str | Path) -> str:
    """The path relative to the working directory when it lies below it, else absolute."""
    p = Path(path).resolve()
    try:
        return str(p.relative_to(Path.cwd()))
    except ValueError:
        return str(p)

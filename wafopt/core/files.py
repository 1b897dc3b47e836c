"""Reading instance and plan files: YAML or JSON into a plain mapping, with the file's sha256.

Files are untrusted. Before any schema sees the data, the reader enforces the limits of
wafopt.core.limits: file size, strict UTF-8, nesting depth, the number of values (an alias
counts as often as it is used, so alias bombs stop early), integer length, finite numbers, no
duplicate keys, string keys, and only the plain types (mappings, lists, strings, numbers,
booleans, null). Every refusal is an InstanceError naming the field path (or line) and the value.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
from pathlib import Path

import yaml
from yaml.composer import ComposerError
from yaml.constructor import SafeConstructor
from yaml.events import (
    AliasEvent,
    MappingEndEvent,
    ScalarEvent,
    SequenceEndEvent,
    SequenceStartEvent,
    StreamEndEvent,
)
from yaml.nodes import MappingNode, ScalarNode, SequenceNode
from yaml.resolver import Resolver

from wafopt.core.errors import InstanceError
from wafopt.core.limits import (
    MAX_DEPTH,
    MAX_FILE_BYTES,
    MAX_INT_DIGITS,
    MAX_JSON_NODES,
    MAX_VALUE_CHARS,
    MAX_YAML_NODES,
)

try:  # libyaml parses; composition stays in Python so that the guards below see every node
    from yaml._yaml import CParser as _Parser

    def _init_parser(loader, text: str) -> None:
        _Parser.__init__(loader, text)
except ImportError:  # pragma: no cover - PyYAML built without libyaml
    from yaml.parser import Parser as _PyParser
    from yaml.reader import Reader
    from yaml.scanner import Scanner

    class _Parser(Reader, Scanner, _PyParser):
        pass

    def _init_parser(loader, text: str) -> None:
        Reader.__init__(loader, text)
        Scanner.__init__(loader)
        _PyParser.__init__(loader)

_INT_LIMIT = 10 ** MAX_INT_DIGITS
_SURROGATE = re.compile("[\ud800-\udfff]")
_MERGE_TAG = "tag:yaml.org,2002:merge"
_INT_TAG = "tag:yaml.org,2002:int"
_FLOAT_TAG = "tag:yaml.org,2002:float"
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]{0,17})\Z")  # a YAML 1.1 decimal int within 10^18
_FLOAT = re.compile(r"-?[0-9]+(?:\.[0-9]*(?:[eE][-+]?[0-9]+)?|[eE][-+]?[0-9]+)\Z")  # 2.5, 1e9
_NUMBER_TAGS = (_INT_TAG, _FLOAT_TAG)
_PLAIN_TYPES = (str, int, float, bool, type(None))


class Refused(Exception):
    """A value the reader does not accept; `path` is the field path inside the document."""

    def __init__(self, message: str, path: str = ""):
        super().__init__(message)
        self.message, self.path = message, path


class _Rejected:
    """Stands in for a literal the parser must not convert (a 4,000-digit integer, NaN in JSON);
    the audit reports it with its field path."""

    __slots__ = ("reason",)

    def __init__(self, reason: str):
        self.reason = reason


def excerpt(value, limit: int = MAX_VALUE_CHARS) -> str:
    """repr(value) cut to `limit` characters (values in messages never flood a terminal)."""
    if isinstance(value, (list, dict, tuple)) and len(value) > limit:  # no repr of a huge list
        text = f"{type(value).__name__} of {len(value)} items"
    elif isinstance(value, int) and value.bit_length() > 4 * limit:  # nor of a 4,000-digit integer
        text = f"an integer of {value.bit_length()} bits"
    elif isinstance(value, str) and len(value) > 4 * limit:
        text = repr(value[:limit])
    else:
        text = repr(value)
    return text if len(text) <= limit else text[:limit - 3] + "..."


def field_path(parts) -> str:
    """('mesh', 'faulty_dies', 0) -> 'mesh.faulty_dies[0]'; long keys shortened."""
    parts = list(parts)
    if len(parts) > 12:  # a deeply nested path: its start and its end say where
        parts = parts[:6] + [Ellipsis] + parts[-4:]
    out = ""
    for part in parts:
        if part is Ellipsis:
            out += "..."
        elif isinstance(part, int) and not isinstance(part, bool):
            out += f"[{part}]"
        else:
            key = str(part)
            key = key if len(key) <= 40 else key[:37] + "..."
            out += f".{key}" if out else key
    return out if len(out) <= 200 else out[:197] + "..."


# --- YAML ---------------------------------------------------------------------------------------

class _Loader(_Parser, SafeConstructor, Resolver):
    """SafeLoader semantics, plus: depth and value budget (aliases counted per use, recursive
    aliases refused), duplicate keys recorded, oversized integers replaced by _Rejected, and
    1e9 / 2E-3 read as numbers (YAML 1.1 wants a dot: 1.0e9). The composer is PyYAML's, in one
    loop that also keeps the field path for messages."""

    def __init__(self, text: str):
        _init_parser(self, text)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self.anchors: dict = {}
        self.trail: list = []         # field path of the node being composed
        self.nodes = 0                # values composed so far, aliases expanded
        self.deepest = 0              # deepest level reached (the root is level 1)
        self.extent: dict = {}        # anchor -> (values, height) of its finished node
        self.duplicates: dict = {}    # id(mapping) -> first repeated key

    def get_single_node(self):
        self.get_event()  # stream start
        node = None
        if not self.check_event(StreamEndEvent):
            self.get_event()  # document start
            node = self._compose(1)
            self.get_event()  # document end
        if not self.check_event(StreamEndEvent):
            raise ComposerError("expected a single document in the stream", None,
                                "but found another document", self.get_event().start_mark)
        self.get_event()
        return node

    def _refuse(self, message: str):
        raise Refused(message, field_path(self.trail))

    def _compose(self, level: int):
        event = self.get_event()
        kind = type(event)
        anchor = event.anchor
        if kind is AliasEvent:
            if anchor not in self.anchors:
                raise ComposerError(None, None, f"found undefined alias {anchor!r}", event.start_mark)
            if anchor not in self.extent:
                self._refuse(f"alias *{anchor} refers to a node that contains it (a recursive structure)")
            values, height = self.extent[anchor]
            self._count(values, level + height - 1)
            return self.anchors[anchor]
        self._count(1, level)
        if anchor is not None:
            if anchor in self.anchors:
                raise ComposerError(None, None, f"found duplicate anchor {anchor!r}", event.start_mark)
            before, outer_deepest = self.nodes - 1, self.deepest
            self.deepest = level
        tag = event.tag
        if kind is ScalarEvent:
            if tag is None or tag == "!":
                tag = self.resolve(ScalarNode, event.value, event.implicit)
            node = ScalarNode(tag, event.value, event.start_mark, event.end_mark, style=event.style)
            if anchor is not None:
                self.anchors[anchor] = node
        elif kind is SequenceStartEvent:
            if tag is None or tag == "!":
                tag = self.resolve(SequenceNode, None, event.implicit)
            node = SequenceNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
            if anchor is not None:
                self.anchors[anchor] = node
            items, trail, index = node.value, self.trail, 0
            trail.append(0)
            while not self.check_event(SequenceEndEvent):
                trail[-1] = index
                items.append(self._compose(level + 1))
                index += 1
            trail.pop()
            node.end_mark = self.get_event().end_mark
        else:  # MappingStartEvent
            if tag is None or tag == "!":
                tag = self.resolve(MappingNode, None, event.implicit)
            node = MappingNode(tag, [], event.start_mark, None, flow_style=event.flow_style)
            if anchor is not None:
                self.anchors[anchor] = node
            items, trail = node.value, self.trail
            trail.append("<key>")
            while not self.check_event(MappingEndEvent):
                trail[-1] = "<key>"
                key = self._compose(level + 1)
                trail[-1] = key.value if isinstance(key, ScalarNode) else "<key>"
                items.append((key, self._compose(level + 1)))
            trail.pop()
            node.end_mark = self.get_event().end_mark
        if anchor is not None:
            self.extent[anchor] = (self.nodes - before, self.deepest - level + 1)
            self.deepest = max(outer_deepest, self.deepest)
        return node

    def _count(self, values: int, level: int) -> None:
        self.nodes += values
        if level > self.deepest:
            self.deepest = level
            if level > MAX_DEPTH:
                self._refuse(f"nesting deeper than {MAX_DEPTH} levels")
        if self.nodes > MAX_YAML_NODES:
            self._refuse(f"more than {MAX_YAML_NODES:,} values (each use of an alias counts in full)")

    def construct_yaml_map(self, node):
        explicit = [k for k, _ in node.value if k.tag != _MERGE_TAG]  # merges may be overridden
        data: dict = {}
        yield data
        data.update(self.construct_mapping(node))
        if len(explicit) > 1:
            seen = set()
            for key_node in explicit:
                key = self.construct_object(key_node)
                if key in seen:
                    self.duplicates[id(data)] = key
                    break
                seen.add(key)

    def resolve(self, kind, value, implicit):
        if kind is ScalarNode and implicit[0]:  # plain numbers, the bulk of a large file, fast
            if _DECIMAL.match(value):
                return _INT_TAG
            if _FLOAT.match(value):
                return _FLOAT_TAG
        return super().resolve(kind, value, implicit)

    def construct_sequence(self, node, deep=False):
        return [self._number(child) if child.tag in _NUMBER_TAGS else self.construct_object(child, deep=deep)
                for child in node.value]

    def _number(self, node):
        """A plain decimal int or float without the generic constructor (same value)."""
        if node.tag == _INT_TAG and _DECIMAL.match(node.value):
            return int(node.value)
        if node.tag == _FLOAT_TAG and _FLOAT.match(node.value):
            return float(node.value)
        return self.construct_object(node)

    def construct_yaml_int(self, node):
        text = node.value.replace("_", "").lstrip("+-")
        if len(text) > MAX_INT_DIGITS + 2:  # 2: a 0x / 0b prefix
            return _Rejected(f"integer with {len(text)} digits (at most {MAX_INT_DIGITS} allowed)")
        value = super().construct_yaml_int(node)
        return value if abs(value) < _INT_LIMIT else _Rejected(
            f"integer out of range (|n| must be < 10^{MAX_INT_DIGITS})")


_Loader.add_constructor("tag:yaml.org,2002:map", _Loader.construct_yaml_map)
_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)
_Loader.add_implicit_resolver(
    _FLOAT_TAG, re.compile(r"^[-+]?[0-9][0-9_]*(?:\.[0-9_]*)?[eE][-+]?[0-9]+$"),
    list("-+0123456789"))


def _load_yaml(text: str):
    loader = _Loader(text)
    try:
        return loader.get_single_data(), loader.duplicates
    finally:
        loader.dispose()


# --- JSON ---------------------------------------------------------------------------------------

def _load_json(text: str):
    duplicates: dict = {}

    def pairs(items):
        data = dict(items)
        if len(data) < len(items):
            seen = set()
            for key, _ in items:
                if key in seen:
                    duplicates[id(data)] = key
                    break
                seen.add(key)
        return data

    def integer(literal: str):
        digits = len(literal.lstrip("-"))
        if digits > MAX_INT_DIGITS:
            return _Rejected(f"integer with {digits} digits (at most {MAX_INT_DIGITS} allowed)")
        return int(literal)

    def constant(name: str):
        return _Rejected(f"must be a finite number, got {name}")

    try:
        data = json.loads(text, object_pairs_hook=pairs, parse_int=integer, parse_constant=constant)
    except RecursionError:
        raise Refused(f"nesting deeper than {MAX_DEPTH} levels") from None
    return data, duplicates


# --- the audit: one walk over the parsed data, shared by YAML and JSON ---------------------------

def audit(data, duplicates: dict | None = None, max_nodes: int = MAX_JSON_NODES) -> None:
    """Raise Refused for the first value outside the limits, naming its field path."""
    duplicates = duplicates or {}
    stack = [(data, ())]
    nodes = 0
    while stack:
        value, path = stack.pop()
        nodes += 1
        if nodes > max_nodes:
            raise Refused(f"more than {max_nodes:,} values", field_path(path))
        if len(path) >= MAX_DEPTH:
            raise Refused(f"nesting deeper than {MAX_DEPTH} levels", field_path(path))
        if isinstance(value, dict):
            if id(value) in duplicates:
                key = duplicates[id(value)]
                raise Refused(f"duplicate key {excerpt(key)}", field_path(path + (key,)))
            for key in value:
                if not isinstance(key, str):
                    raise Refused(f"key {excerpt(key)} is not a string (quote it)", field_path(path))
                if _SURROGATE.search(key):
                    raise Refused(f"key {excerpt(key)} is not valid Unicode (lone surrogate)",
                                  field_path(path))
            stack.extend((value[key], path + (key,)) for key in reversed(value))
        elif isinstance(value, list):
            if len(path) + 1 < MAX_DEPTH and _plain_numbers(value):  # counted here, not pushed: fast
                nodes += len(value)
                continue
            stack.extend((item, path + (k,)) for k, item in reversed(list(enumerate(value))))
        else:
            _audit_scalar(value, path)


def _plain_numbers(items: list) -> bool:
    """True if every item is a finite int or float within the limits (three passes in C)."""
    try:
        total = sum(items)
        if not (-_INT_LIMIT < min(items) and max(items) < _INT_LIMIT):
            return False
    except (TypeError, ValueError, OverflowError):  # not all numbers, or empty
        return False
    return total - total == 0  # NaN and infinities make the sum non-finite


def _audit_scalar(value, path: tuple) -> None:
    if isinstance(value, _Rejected):
        raise Refused(value.reason, field_path(path))
    if isinstance(value, float):
        if not math.isfinite(value):
            raise Refused(f"must be a finite number, got {value!r}", field_path(path))
    elif isinstance(value, int) and not isinstance(value, bool):
        if abs(value) >= _INT_LIMIT:
            raise Refused(f"integer out of range (|n| must be < 10^{MAX_INT_DIGITS})", field_path(path))
    elif isinstance(value, str):
        if _SURROGATE.search(value):
            raise Refused(f"not valid Unicode (lone surrogate): {excerpt(value)}", field_path(path))
    elif not isinstance(value, _PLAIN_TYPES):
        raise Refused(f"{type(value).__name__} values are not allowed, got {excerpt(value)} "
                      "(quote it to make it a string)", field_path(path))


def check_document(data, max_nodes: int) -> None:
    """The reader's limits on data that did not come from a file (e.g. a dict given to the API)."""
    try:
        audit(data, None, max_nodes)
    except Refused as exc:
        raise InstanceError(exc.message, exc.path or None) from None


# --- entry points ---------------------------------------------------------------------------------

def _line_column(raw: bytes, offset: int) -> tuple[int, int]:
    line_start = raw.rfind(b"\n", 0, offset) + 1
    return raw.count(b"\n", 0, offset) + 1, offset - line_start + 1


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        line, column = _line_column(raw, exc.start)
        text = raw[raw.rfind(b"\n", 0, exc.start) + 1:exc.start].decode("utf-8", "replace")
        key = re.match(r"\s*(?:-\s+)*[\"']?([\w.-]+)[\"']?\s*:", text)
        field = f" in field {key.group(1)!r}" if key else ""
        raise InstanceError(f"not valid UTF-8{field}: byte 0x{raw[exc.start]:02x} at line {line}, "
                            f"column {column}", where) from None


def parse_text(raw: bytes, kind: str, where: str):
    """Bytes of a YAML or JSON document -> plain Python data within the limits."""
    if len(raw) > MAX_FILE_BYTES:
        raise InstanceError(f"file of {len(raw):,} bytes exceeds the limit of {MAX_FILE_BYTES:,} bytes",
                            where)
    text = _decode(raw, where)
    try:
        if kind == "json":
            data, duplicates = _load_json(text)
            audit(data, duplicates, MAX_JSON_NODES)
        else:
            data, duplicates = _load_yaml(text)
            audit(data, duplicates, MAX_YAML_NODES)
    except Refused as exc:
        raise InstanceError(f"{exc.path}: {exc.message}" if exc.path else exc.message, where) from None
    except (yaml.YAMLError, json.JSONDecodeError) as exc:
        raise InstanceError(_syntax_message(exc, kind, text), where) from None
    return data


def _syntax_message(exc, kind: str, text: str) -> str:
    if isinstance(exc, json.JSONDecodeError):
        return f"malformed JSON at line {exc.lineno}, column {exc.colno}: {exc.msg}"
    mark = getattr(exc, "problem_mark", None)
    if mark is None and getattr(exc, "position", None) is not None:  # a ReaderError: bad character
        line = text.count("\n", 0, exc.position) + 1
        character = f" (character #x{exc.character:04x})" if isinstance(exc.character, int) else ""
        return f"malformed YAML at line {line}: {str(exc.reason)[:120]}{character}"
    at = f" at line {mark.line + 1}, column {mark.column + 1}" if mark else ""
    reason = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    return f"malformed {kind.upper()}{at}: {reason if len(reason) <= 160 else reason[:157] + '...'}"


def read_bytes(path: str | Path) -> bytes:
    """The file's bytes, refusing files over MAX_FILE_BYTES before reading them whole."""
    p = Path(path)
    try:
        with p.open("rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except FileNotFoundError:
        raise InstanceError("no such file", str(path)) from None
    except IsADirectoryError:
        raise InstanceError("is a directory, not an instance file", str(path)) from None
    except OSError as exc:
        raise InstanceError(f"cannot read: {exc.strerror}", str(path)) from None
    if len(raw) > MAX_FILE_BYTES:
        raise InstanceError(f"file exceeds the limit of {MAX_FILE_BYTES:,} bytes", str(path))
    return raw


def read_mapping(path: str | Path) -> tuple[dict, str]:
    """Read a YAML or JSON file into a mapping; returns it with the file's sha256."""
    p = Path(path)
    raw = read_bytes(p)
    digest = hashlib.sha256(raw).hexdigest()
    data = parse_text(raw, "json" if p.suffix == ".json" else "yaml", str(path))
    if data is None:
        raise InstanceError("the file is empty (an instance is a mapping with a 'problem:' key at the top)", str(path))
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


def can_create(path: str | Path) -> bool:
    """Whether a file can be written at `path`, creating its missing parent directories as the
    writers do: not a directory itself, and the nearest existing ancestor is a directory this
    process may write into."""
    if Path(path).is_dir():
        return False
    ancestor = Path(path).resolve().parent
    while not ancestor.exists():
        ancestor = ancestor.parent
    return ancestor.is_dir() and os.access(ancestor, os.W_OK | os.X_OK)


def write_text(path: str | Path, text: str) -> Path:
    """Write `text` to `path` atomically (a temporary file renamed over it), so an interrupted
    write never leaves half a file. A path that names a device or a pipe (/dev/null, /dev/stdout)
    is written into instead: renaming over it would replace the device with a file."""
    p = Path(path)
    if p.exists() and not stat.S_ISREG(p.stat().st_mode):
        with open(p, "w") as out:
            out.write(text)
        return p
    p.parent.mkdir(parents=True, exist_ok=True)
    tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(text)
        tmp.replace(p)
    except BaseException:  # a full disk, Ctrl-C: no stray temporary file either
        tmp.unlink(missing_ok=True)
        raise
    return p

"""Instance schemas on pydantic v2: the shared base, bounded number types, and validation errors
turned into one short InstanceError naming the field path and the offending value.

Every mapping an instance file holds is described once, by a model here or beside the code that
uses it. A `Record` (a problem's `Document`, a wafer, an LLM, a training mapping) is validated on
its own: its validators check each field, then `build` checks the rules across fields and makes
the typed value (`record.value`); `Record.of(value)` and `dump()` write it back as a mapping.
`json_schema` renders a Document for `wafopt schema PROBLEM`. Types are strict (no "8" for 8, no
true for 1), numbers finite and bounded by wafopt.core.limits, unknown keys rejected.
"""

from __future__ import annotations

import math
from functools import partial
from typing import Annotated, Any, ClassVar, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    model_validator,
)
from pydantic_core import PydanticCustomError

from wafopt.core.errors import InstanceError
from wafopt.core.files import excerpt, field_path
from wafopt.core.limits import (
    MAX_AMOUNT,
    MAX_COUNT,
    MAX_DIES,
    MAX_NAME_CHARS,
    MAX_SECONDS,
    MAX_TEXT_CHARS,
    MAX_VOLUME,
    MIN_RATE,
)

SCHEMA_VERSION = 1  # the newest `schema:` version of instance files this wafopt reads

_SPECS: dict[str, type["Spec"]] = {}  # class name -> Spec, for the noun of a shape in messages


def field_at(where: str, key: str) -> str:
    """The path of `key` inside the mapping at `where` ('' is the document itself)."""
    return f"{where}.{key}" if where else key


def rule(message: str, *at) -> PydanticCustomError:
    """A validator's error reported with `message` as it is, at the validated field (or `at` below
    it: an index or a key)."""
    return PydanticCustomError("rule", "{message}", {"message": message, "at": at})


class Spec(BaseModel):
    """A mapping of an instance file: strict types, finite numbers, no unknown keys. A key given
    as null means its default, as if it were absent."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=False)
    noun: ClassVar[str] = "a mapping"  # how messages name this shape ("must be 'minimal' or {detour: k}")
    # the wafer, LLM and training mappings: null reads as absent (a required key: missing), and an
    # unknown key is reported only when the known ones pass (their own fields come first)
    null_is_missing: ClassVar[bool] = False
    keys_after_fields: ClassVar[bool] = False

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs):
        super().__pydantic_init_subclass__(**kwargs)
        _SPECS[cls.__name__] = cls

    @classmethod
    def allowed_keys(cls, data: dict) -> list[str]:
        """The keys an unknown key's message lists."""
        return [f.alias or name for name, f in cls.model_fields.items()]

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data, info: ValidationInfo):
        """Unknown keys, reported with the allowed ones (pydantic's extra="forbid" names neither)."""
        if isinstance(data, dict):
            allowed = [f.alias or name for name, f in cls.model_fields.items()]
            unknown = [key for key in data if key not in allowed]
            if unknown:
                error = PydanticCustomError(
                    "unknown_key", "unknown key {key} (allowed: {allowed})",
                    {"key": excerpt(unknown[0]), "field": unknown[0],
                     "allowed": ", ".join(sorted(cls.allowed_keys(data)))})
                missing = [name for name, f in cls.model_fields.items()
                           if f.is_required() and (f.alias or name) not in data]
                if missing or not (cls.keys_after_fields and info.context is not None):
                    raise error   # at once beside a missing required field: the unknown key is likely its typo
                info.context["unknown_key"] = error  # Record._build raises it once the fields pass
                data = {key: value for key, value in data.items() if key in allowed}
            if cls.null_is_missing:
                data = {key: value for key, value in data.items() if value is not None}
        return data

    @model_validator(mode="after")
    def _null_means_default(self):
        """An optional key given as null takes its default (`tile: null` is the tile [1, 1])."""
        for name, info in type(self).model_fields.items():
            if self.__dict__[name] is None and info.default is not None:
                self.__dict__[name] = info.default
        return self

    def dump(self) -> dict:
        """The mapping of the keys it was made with, in field order (Record.of, Spec.model_construct)."""
        return self.model_dump(by_alias=True, exclude_unset=True)


class Record(Spec):
    """A mapping validated on its own (a document, a wafer, an LLM, training): validation ends with
    `build`, which checks the rules across fields and makes the typed value (`value`). Errors name
    their field path below `where`, given as the validation context (see `validate`)."""

    _value: Any = PrivateAttr(None)

    @model_validator(mode="after")
    def _build(self, info: ValidationInfo):
        context = info.context or {}
        if "unknown_key" in context:
            raise context["unknown_key"]
        self._value = self.build(context.get("where", ""))
        return self

    def build(self, where: str):
        """The typed value; raises InstanceError naming a field below `where`."""
        raise NotImplementedError

    @property
    def value(self):
        return self._value

    @classmethod
    def of(cls, value, **keys) -> "Record":
        """The record that builds `value` (unvalidated: `value` is valid); `dump()` writes it."""
        raise NotImplementedError


def _integral(value):
    """8.0 and 8e0 (YAML reads 1e3 as a float) are the integer 8; true and "8" stay wrong."""
    return int(value) if type(value) is float and value.is_integer() else value


def integer(ge: int, le: int):
    """An int in [ge, le]."""
    return Annotated[int, Field(ge=ge, le=le), BeforeValidator(_integral)]


def number(*, gt: float | None = None, ge: float | None = None, le: float = MAX_AMOUNT):
    """A finite float (an int is accepted) above gt or from ge, up to le."""
    return Annotated[float, Field(gt=gt, ge=ge, le=le)]


Name = Annotated[str, Field(max_length=MAX_NAME_CHARS)]
Text = Annotated[str, Field(max_length=MAX_TEXT_CHARS)]
Amount = number(ge=0)                         # bytes, states, capacities, spares: 0 .. 1e18
PositiveAmount = number(gt=0)
Seconds = number(ge=0, le=MAX_SECONDS)
Volume = number(ge=0, le=MAX_VOLUME)          # flow volumes: exact integers up to 2^53
PositiveVolume = number(gt=0, le=MAX_VOLUME)
Rate = number(ge=MIN_RATE)                    # bandwidths: a volume over a rate stays finite
Objective = number(ge=-MAX_AMOUNT)
DieCount = integer(1, MAX_DIES)
Version = integer(1, 10**6)


# --- the wafer, LLM and training mappings' field types ------------------------------------------
# Presets merge with overrides before these are validated, so a user's and a preset's value read
# alike; each check reports the value the way the scenario's messages always have.

def checked_count(value, *, positive: bool = False, nonnegative: bool = False, maximum: int = MAX_COUNT) -> int:
    """An integer (8.0 and 8e0 read as 8; true and "8" do not) with |value| <= maximum."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if not isinstance(value, int) or isinstance(value, bool):
        raise rule(f"must be an integer, got {excerpt(value)}")
    if positive and value <= 0:
        raise rule(f"must be a positive integer, got {value!r}")
    if nonnegative and value < 0:
        raise rule(f"must be >= 0, got {value!r}")
    if abs(value) > maximum:
        raise rule(f"must be <= {maximum:,} (limit), got {excerpt(value)}")
    return value


def count(*, positive: bool = False, nonnegative: bool = False, maximum: int = MAX_COUNT):
    """An int field checked by checked_count."""
    return Annotated[int, BeforeValidator(partial(checked_count, positive=positive, nonnegative=nonnegative,
                                                  maximum=maximum))]


def quantity(*, positive: bool = False, nonnegative: bool = False, minimum: float | None = None,
             maximum: float = MAX_AMOUNT):
    """A finite number with |value| <= maximum (and >= minimum), as a float."""
    def check(value):
        if not (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)):
            raise rule(f"must be a finite number, got {excerpt(value)}")
        if positive and not value > 0:
            raise rule(f"must be positive, got {value!r}")
        if nonnegative and value < 0:
            raise rule(f"must be >= 0, got {value!r}")
        if minimum is not None and value < minimum:
            raise rule(f"must be >= {minimum:g} (limit), got {value!r}")
        if abs(value) > maximum:
            raise rule(f"must be <= {maximum:g} (limit), got {value!r}")
        return float(value)
    return Annotated[float, BeforeValidator(check)]


def _flag(value):
    if not isinstance(value, bool):
        raise rule(f"must be true or false, got {excerpt(value)}")
    return value


def text(*choices: str):
    """A string, one of `choices` if any are given."""
    def check(value):
        if not isinstance(value, str):
            raise rule(f"must be a string, got {excerpt(value)}")
        if choices and value not in choices:
            raise rule(f"must be one of {', '.join(choices)}; got {excerpt(value)}")
        return value
    return Annotated[str, BeforeValidator(check)]


def _entries(value):
    if not isinstance(value, list):
        raise rule(f"must be a list, got {excerpt(value)}")
    return value


Flag = Annotated[bool, BeforeValidator(_flag)]
Entries = Annotated[list[Any], BeforeValidator(_entries)]


# --- documents ------------------------------------------------------------------------------------

class KnownOptimum(Spec):
    value: Objective = Field(description="the optimum (or best known) objective value")
    source: Text
    proven: bool | None = Field(True, description="false for a best known value")


class Document(Record):
    """Keys common to every instance file; each problem's Document adds its own and `to_instance`."""

    problem: str
    schema_version: Version | None = Field(1, alias="schema", description="schema version")
    name: Name | None = None
    description: Text | None = None
    source: Text | dict[str, Any] | None = Field(None, description="provenance: text or a mapping")
    known_optimum: KnownOptimum | None = None

    def build(self, where: str):
        if self.schema_version > SCHEMA_VERSION:
            raise InstanceError(f"schema version {self.schema_version} is newer than this wafopt supports "
                                f"({SCHEMA_VERSION})", "schema")
        if self.known_optimum is None and "known_optimum" in self.model_fields_set:
            raise InstanceError("missing required field", "known_optimum")  # null: not a mapping
        return self.to_instance(where)

    def to_instance(self, where: str):
        """The problem's typed instance, after the checks across its fields."""
        raise NotImplementedError

    @classmethod
    def of(cls, instance, name: str | None = None, description: str | None = None) -> "Document":
        """The document of `instance`: `problem`, `name` and `description` when given, then the
        problem's keys (`keys_of`)."""
        common = {"problem": get_args(cls.model_fields["problem"].annotation)[0]}
        if name:
            common["name"] = name
        if description:
            common["description"] = description
        return cls.model_construct(**common, **cls.keys_of(instance))

    @classmethod
    def keys_of(cls, instance) -> dict:
        """The problem's fields of `instance`, as specs and plain values."""
        raise NotImplementedError


# --- errors -------------------------------------------------------------------------------------

_NOUNS = {"string_type": "a string", "dict_type": "a mapping", "list_type": "a list",
          "int_type": "an integer", "float_type": "a number", "bool_type": "true or false",
          "none_required": "null"}


def _noun(error: dict) -> str | None:
    """What a type error asked for ("a string"), or None for a constraint error."""
    kind = error["type"]
    if kind == "literal_error":
        return error["ctx"]["expected"]
    if kind in ("model_type", "model_attributes_type"):
        return _SPECS.get((error.get("ctx") or {}).get("class_name"), Spec).noun
    return _NOUNS.get(kind)


def _located(error: dict, data) -> tuple[tuple, Any]:
    """(field path inside the document, the value there).

    Union members add tags such as 'str' or "literal['minimal']" to pydantic's loc; they are
    not in the data and are skipped."""
    path: list = []
    value = data
    loc = error["loc"]
    for k, part in enumerate(loc):
        if isinstance(part, int) and isinstance(value, list) and 0 <= part < len(value):
            path.append(part)
            value = value[part]
        elif isinstance(part, str) and isinstance(value, dict) and part in value:
            path.append(part)
            value = value[part]
        elif error["type"] == "missing" and k == len(loc) - 1:
            path.append(part)
    if error["type"] == "unknown_key":
        path.append(error["ctx"]["field"])
    if error["type"] == "rule":
        path.extend(error["ctx"]["at"])
    return tuple(path), value


def _message(error: dict, value, alternatives: list[dict]) -> str:
    """One error in the style of the rest of wafopt: 'must be positive, got -1'."""
    kind, ctx = error["type"], error.get("ctx") or {}
    got = f", got {excerpt(value)}"
    if kind == "missing":
        return "missing required field"
    if kind == "rule":
        return ctx["message"]
    if kind == "unknown_key":
        return error["msg"]
    if kind == "literal_error" and len(alternatives) == 1:
        choices = ctx["expected"].replace("'", "").replace(" or ", ", ")
        return f"must be one of {choices}; got {excerpt(value)}"
    if _noun(error) is not None:  # type errors of one or several union alternatives
        return "must be " + " or ".join(dict.fromkeys(_noun(e) for e in alternatives)) + got
    if kind == "greater_than":
        return ("must be positive" if ctx["gt"] == 0 else f"must be > {ctx['gt']}") + got
    if kind == "greater_than_equal":
        if ctx["ge"] == 0:
            return "must be >= 0" + got
        if ctx["ge"] == 1 and isinstance(value, int):
            return "must be a positive integer" + got
        return f"must be at least {ctx['ge']}" + got
    if kind in ("less_than_equal", "less_than"):
        bound = ctx.get("le", ctx.get("lt"))
        shown = f"{bound:g}" if isinstance(bound, float) else f"{bound:,}"
        return f"must be {'<=' if kind == 'less_than_equal' else '<'} {shown} (limit)" + got
    if kind == "finite_number":
        return "must be a finite number" + got
    if kind == "too_short":
        return f"must have at least {ctx['min_length']} items, got {ctx['actual_length']}"
    if kind == "too_long":
        return f"must have at most {ctx['max_length']:,} items (limit), got {ctx.get('actual_length', 'more')}"
    if kind == "string_too_long":
        return f"must be at most {ctx['max_length']:,} characters (limit)"
    if kind == "value_error":
        return str(ctx.get("error", error["msg"]))
    if isinstance(value, dict):  # a rule over a whole mapping (a model validator): the message says it
        return error["msg"]
    return error["msg"] + got


def describe(exc: ValidationError, data, where: str = "") -> InstanceError:
    """The most specific error of a ValidationError as one InstanceError.

    Most specific: the deepest field path into the data; there, a constraint error (the type
    matched) beats type errors, and type errors of union alternatives merge into one message
    ("must be a string or a mapping")."""
    located = [(error, *_located(error, data)) for error in exc.errors(include_url=False)]
    deepest = max(len(path) for _, path, _ in located)
    here = [item for item in located if len(item[1]) == deepest]
    specific = [item for item in here if _noun(item[0]) is None]
    error, path, value = (specific or here)[0]
    alternatives = [error] if specific else [item[0] for item in here]
    inside = field_path(path)
    if where and inside:
        inside = where + inside if inside.startswith("[") else f"{where}.{inside}"
    return InstanceError(_message(error, value, alternatives), inside or where or None)


def validate(model: type[BaseModel], data, where: str = ""):
    """model.model_validate(data), or InstanceError for the most specific problem. Paths in
    messages start at `where` (a Record's checks across fields name their own, below it)."""
    try:
        return model.model_validate(data, context={"where": where})
    except ValidationError as exc:
        for error in exc.errors(include_url=False):
            if isinstance((error.get("ctx") or {}).get("error"), InstanceError):
                raise error["ctx"]["error"] from None
        raise describe(exc, data, where) from None


def json_schema(model: type[BaseModel]) -> dict:
    """The JSON Schema (draft 2020-12) of a Document model, as `wafopt schema` prints it."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    problem = get_args(model.model_fields["problem"].annotation)
    if problem:
        schema["title"] = f"wafopt {problem[0]} instance"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}



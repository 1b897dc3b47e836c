"""Instance schemas on pydantic v2: the shared base, bounded number types, and validation errors
turned into one short InstanceError naming the field path and the offending value.

Each problem publishes a `Document` model (wafopt.problems.<problem>.schema) that validates the
file's mapping before the problem's constructor builds the typed instance; `json_schema`
renders it for `wafopt schema PROBLEM`. Types are strict (no "8" for 8, no true for 1), numbers
finite and bounded by wafopt.core.limits, unknown keys rejected.
"""

from __future__ import annotations

from typing import Annotated, Any, ClassVar, get_args

from pydantic import (
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    model_validator,
)
from pydantic_core import PydanticCustomError

from wafopt.core.errors import InstanceError
from wafopt.core.files import excerpt, field_path
from wafopt.core.limits import (
    MAX_AMOUNT,
    MAX_DIES,
    MAX_NAME_CHARS,
    MAX_SECONDS,
    MAX_TEXT_CHARS,
    MAX_VOLUME,
    MIN_RATE,
)

_SPECS: dict[str, type["Spec"]] = {}  # class name -> Spec, for the noun of a shape in messages


class Spec(BaseModel):
    """A mapping of an instance file: strict types, finite numbers, no unknown keys."""

    model_config = ConfigDict(extra="forbid", strict=True, allow_inf_nan=False, frozen=True,
                              populate_by_name=False)
    noun: ClassVar[str] = "a mapping"  # how messages name this shape ("must be 'minimal' or {detour: k}")

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs):
        super().__pydantic_init_subclass__(**kwargs)
        _SPECS[cls.__name__] = cls

    @model_validator(mode="before")
    @classmethod
    def _known_keys(cls, data):
        """Unknown keys, reported with the allowed ones (pydantic's extra="forbid" names neither)."""
        if isinstance(data, dict):
            allowed = [f.alias or name for name, f in cls.model_fields.items()]
            for key in data:
                if key not in allowed:
                    raise PydanticCustomError(
                        "unknown_key", "unknown key {key} (allowed: {allowed})",
                        {"key": excerpt(key), "field": key, "allowed": ", ".join(sorted(allowed))})
        return data


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


class KnownOptimum(Spec):
    value: Objective = Field(description="the optimum (or best known) objective value")
    source: Text
    proven: bool | None = Field(True, description="false for a best known value")


class Document(Spec):
    """Keys common to every instance file; each problem's Document adds its own."""

    problem: str
    schema_version: Version | None = Field(1, alias="schema", description="schema version")
    name: Name | None = None
    description: Text | None = None
    source: Text | dict[str, Any] | None = Field(None, description="provenance: text or a mapping")
    known_optimum: KnownOptimum | None = None


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
    return tuple(path), value


def _message(error: dict, value, alternatives: list[dict]) -> str:
    """One error in the style of the rest of wafopt: 'must be positive, got -1'."""
    kind, ctx = error["type"], error.get("ctx") or {}
    got = f", got {excerpt(value)}"
    if kind == "missing":
        return "missing required field"
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


def describe(exc: ValidationError, data) -> InstanceError:
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
    return InstanceError(_message(error, value, alternatives), field_path(path) or None)


def validate(model: type[BaseModel], data):
    """model.model_validate(data), or InstanceError for the most specific problem."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise describe(exc, data) from None


def json_schema(model: type[BaseModel]) -> dict:
    """The JSON Schema (draft 2020-12) of a Document model, as `wafopt schema` prints it."""
    schema = model.model_json_schema(by_alias=True, mode="validation")
    problem = get_args(model.model_fields["problem"].annotation)
    if problem:
        schema["title"] = f"wafopt {problem[0]} instance"
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **schema}



"""JSON Schema validation of tool arguments whose regular expressions cannot stall the caller.

A spec's ``pattern`` is matched against model-written arguments, and Python's ``re`` backtracks without
bound (``^(a|aa)+$`` against a few dozen characters runs for minutes). Patterns run on the ``regex`` engine
under a timeout instead; a check that times out is a violation whose message says so.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from typing import Any

import jsonschema
import regex


def _bounded_pattern(timeout_s: float):
    def pattern(validator: Any, expression: str, instance: Any, schema: dict[str, Any]) -> Iterator[Any]:
        if not validator.is_type(instance, "string"):
            return
        try:
            matched = regex.search(expression, instance, timeout=timeout_s)
        except TimeoutError:
            yield jsonschema.ValidationError(f"checking pattern {expression!r} took over {timeout_s:g} s")
            return
        except regex.error as exc:
            yield jsonschema.ValidationError(f"the spec's pattern {expression!r} is not a valid regex: {exc}")
            return
        if matched is None:
            yield jsonschema.ValidationError(f"{instance!r} does not match {expression!r}")
    return pattern


@cache
def _validator_class(timeout_s: float) -> type:
    return jsonschema.validators.extend(jsonschema.Draft202012Validator, {"pattern": _bounded_pattern(timeout_s)})


@cache
def _validator(schema_json: str, timeout_s: float) -> jsonschema.protocols.Validator:
    return _validator_class(timeout_s)(json.loads(schema_json))


def bounded_validator(schema: dict[str, Any], pattern_timeout_s: float) -> jsonschema.protocols.Validator:
    """A Draft 2020-12 validator for ``schema`` (cached per schema) whose patterns give up after the timeout."""
    return _validator(json.dumps(schema, sort_keys=True), pattern_timeout_s)

"""Validation errors as people read them: all at once, typos named with what was meant."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel, ValidationError
from ultraplane.api import problems
from ultraplane.api.schemas import (
    MAX_SPEC_DEPTH,
    InferenceJobCreate,
    TrainingJobCreate,
    check_nesting,
)


def described(model: type[BaseModel], body: dict[str, Any]) -> tuple[str, str]:
    with pytest.raises(ValidationError) as caught:
        model.model_validate(body)
    return problems.summary(problems.describe(caught.value.errors(), model=model))


def test_a_typo_is_named_with_the_field_it_was_meant_to_be() -> None:
    field, message = described(TrainingJobCreate, {
        "metadata": {"name": "a"}, "spec": {"chps": 4, "work": {"durationSeconds": 60}}})
    assert field == "spec.chps"
    assert message == "unknown field chps in spec; did you mean chips?"


def test_every_problem_at_once_even_in_nested_models() -> None:
    _, message = described(InferenceJobCreate, {
        "metadata": {"name": "a", "labls": {}},
        "spec": {"replicas": 1, "chipsPerReplica": 4,
                 "model": {"nme": "x", "parametersBillions": 7},
                 "load": {"requestsPerSecnd": 3}}})
    assert message.startswith("3 problems: ")
    for hint in ("labls in metadata; did you mean labels?",
                 "nme in spec.model; did you mean name?",
                 "requestsPerSecnd in spec.load; did you mean requestsPerSecond?"):
        assert hint in message


def test_an_unknown_field_with_no_close_name_has_no_guess() -> None:
    _, message = described(TrainingJobCreate, {
        "metadata": {"name": "a"},
        "spec": {"chips": 4, "work": {"durationSeconds": 60}, "zzzzzz": 1}})
    assert message == "unknown field zzzzzz in spec"


def test_more_than_twenty_problems_are_counted() -> None:
    spec = {"chips": 4, "work": {"durationSeconds": 60}, **{f"x{i}": i for i in range(30)}}
    _, message = described(TrainingJobCreate, {"metadata": {"name": "a"}, "spec": spec})
    assert message.startswith("30 problems: ") and message.endswith("; and 10 more")


def test_apiversion_and_kind_must_match_when_given() -> None:
    good = {"apiVersion": "ultraplane.dev/v1alpha1", "kind": "TrainingJob",
            "metadata": {"name": "a"}, "spec": {"chips": 4, "work": {"durationSeconds": 60}}}
    TrainingJobCreate.model_validate(good)
    field, _ = described(TrainingJobCreate, {**good, "kind": "InferenceJob"})
    assert field == "kind"


@pytest.mark.parametrize("depth", [MAX_SPEC_DEPTH + 1, 100_000])
def test_nesting_is_measured_without_recursion(depth: int) -> None:
    value: Any = []
    for _ in range(depth):
        value = [value]
    with pytest.raises(ValueError, match=f"nests deeper than {MAX_SPEC_DEPTH} levels"):
        check_nesting(value, where="spec")
    check_nesting({"a": [{"b": [1, 2, {"c": None}]}]}, where="spec")

"""Kubernetes' label and annotation rules (ultraplane.resources.labels), one table each."""

from __future__ import annotations

import re

import pytest

from ultraplane.resources.labels import (
    KEY_PATTERN,
    MAX_LABELS,
    VALUE_PATTERN,
    check_annotations,
    check_labels,
)

GOOD_KEYS = ["app", "app.kubernetes.io/name", "a_b.c-d", "x" * 63, "A1",
             f"{'p' * 253}/n", "ultraplane.dev/team"]
BAD_KEYS = [("", "name is empty"), ("../x", "prefix must be a DNS subdomain"),
            ("/x", "prefix before '/' is empty"), ("x/", "name is empty"),
            ("x" * 64, "at most 63"), ("-x", "start and end"), ("a b", "start and end"),
            ("Upper.Case/x", "prefix must be"), (f"{'p' * 254}/n", "prefix must be"),
            ("\u0000", "start and end"), ("é", "start and end")]


@pytest.mark.parametrize("key", GOOD_KEYS)
def test_good_keys(key: str) -> None:
    assert check_labels({key: "v"}) == {key: "v"}
    assert check_annotations({key: "any text at all; --"})
    assert re.fullmatch(KEY_PATTERN, key)  # the OpenAPI pattern says the same


@pytest.mark.parametrize(("key", "reason"), BAD_KEYS)
def test_bad_keys_name_the_key_and_why(key: str, reason: str) -> None:
    with pytest.raises(ValueError, match=re.escape(reason)):
        check_labels({key: "v"})
    with pytest.raises(ValueError, match="annotation key"):
        check_annotations({key: "v"})
    if len(key.rpartition("/")[0]) <= 253:  # a pattern cannot bound the prefix alone
        assert not re.fullmatch(KEY_PATTERN, key)


@pytest.mark.parametrize(("value", "ok"), [
    ("", True), ("v1.2_3-x", True), ("x" * 63, True), ("x" * 64, False),
    ("y'; --", False), ("\u0000", False), ("-a", False), ("a\n", False)])
def test_label_values(value: str, ok: bool) -> None:
    if ok:
        check_labels({"k": value})
    else:
        with pytest.raises(ValueError, match="invalid value"):
            check_labels({"k": value})
    assert bool(re.fullmatch(VALUE_PATTERN, value)) is ok


def test_counts_and_total_size_are_bounded() -> None:
    check_labels({f"k{i}": "v" for i in range(MAX_LABELS)})
    with pytest.raises(ValueError, match=f"at most {MAX_LABELS} labels"):
        check_labels({f"k{i}": "v" for i in range(MAX_LABELS + 1)})
    with pytest.raises(ValueError, match="total at most 262144 bytes"):
        check_annotations({f"k{i}": "v" * 5000 for i in range(60)})

"""Kubernetes' own rules for label and annotation keys and values, in one place.

The API server refuses a label such as `{"../x": "y'; --"}`; the embedded backend
must refuse it too, with the same rule, so a manifest that works in one works in
the other. The rules are apimachinery's (`IsQualifiedName`, `IsValidLabelValue`,
`ValidateAnnotations`): a key is an optional DNS-subdomain prefix and `/`, then a
name of at most 63 characters; a label value is at most 63 characters of the same
alphabet or empty; annotations may hold any value but all of them together stay
within 256 KiB. Kubernetes sets no count; `MAX_LABELS` is ours, so no request can
make a list answer huge.
"""

from __future__ import annotations

import re
from typing import Any

NAME_MAX = 63
PREFIX_MAX = 253
MAX_LABELS = 64
MAX_ANNOTATIONS = 64
ANNOTATIONS_TOTAL_MAX = 256 * 1024

NAME_RE = r"([A-Za-z0-9][-A-Za-z0-9_.]{0,61})?[A-Za-z0-9]"  # at most 63 characters
PREFIX_RE = r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
KEY_PATTERN = rf"^({PREFIX_RE}/)?{NAME_RE}$"
VALUE_PATTERN = rf"^({NAME_RE})?$"
_NAME = re.compile(NAME_RE)
_PREFIX = re.compile(PREFIX_RE)
_VALUE = re.compile(VALUE_PATTERN)


def key_problem(key: str) -> str | None:
    """Why `key` is not a qualified name, or None when it is."""
    prefix, slash, name = key.rpartition("/")
    if slash and not prefix:
        return "its prefix before '/' is empty"
    if prefix and (len(prefix) > PREFIX_MAX or not _PREFIX.fullmatch(prefix)):
        return f"its prefix must be a DNS subdomain of at most {PREFIX_MAX} characters"
    if not name:
        return "its name is empty"
    if len(name) > NAME_MAX:
        return f"its name must be at most {NAME_MAX} characters"
    if not _NAME.fullmatch(name):
        return ("its name must start and end with a letter or digit and hold only letters, "
                "digits, '-', '_' and '.'")
    return None


def check_labels(labels: dict[str, str]) -> dict[str, str]:
    """`labels` unchanged if Kubernetes would accept them; ValueError naming the label if not."""
    if len(labels) > MAX_LABELS:
        raise ValueError(f"at most {MAX_LABELS} labels are allowed, got {len(labels)}")
    for key, value in labels.items():
        problem = key_problem(key)
        if problem:
            raise ValueError(f"label key {key[:80]!r} is not valid: {problem}")
        if len(value) > NAME_MAX or not _VALUE.fullmatch(value):
            raise ValueError(
                f"label {key!r} has an invalid value: at most {NAME_MAX} characters, empty or "
                "starting and ending with a letter or digit, only letters, digits, '-', '_', '.'")
    return labels


def check_annotations(annotations: dict[str, str]) -> dict[str, str]:
    """`annotations` unchanged if Kubernetes would accept them; ValueError naming the problem."""
    if len(annotations) > MAX_ANNOTATIONS:
        raise ValueError(f"at most {MAX_ANNOTATIONS} annotations are allowed, "
                         f"got {len(annotations)}")
    total = 0
    for key, value in annotations.items():
        problem = key_problem(key)
        if problem:
            raise ValueError(f"annotation key {key[:80]!r} is not valid: {problem}")
        total += len(key.encode()) + len(value.encode())
    if total > ANNOTATIONS_TOTAL_MAX:
        raise ValueError(f"annotations may total at most {ANNOTATIONS_TOTAL_MAX} bytes, "
                         f"got {total}")
    return annotations


def labels_json_schema() -> dict[str, Any]:
    """The same rules as JSON Schema, for the OpenAPI document."""
    return {
        "maxProperties": MAX_LABELS,
        # JSON Schema cannot say "prefix at most 253" apart from the name: the total bounds it.
        "propertyNames": {"pattern": KEY_PATTERN, "maxLength": PREFIX_MAX + 1 + NAME_MAX},
        "additionalProperties": {"type": "string", "maxLength": NAME_MAX,
                                 "pattern": VALUE_PATTERN},
    }

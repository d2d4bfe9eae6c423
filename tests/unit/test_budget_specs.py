"""A PowerBudget's spec read once for the operator and the API, and its status document."""

from __future__ import annotations

import pytest

from ultraplane.hardware.topology import build_fleet
from ultraplane.placement.allocator import Allocator
from ultraplane.policies.budgetdocuments import (
    InvalidBudgetError,
    budget_spec,
    budget_specs,
    budget_statuses,
    budget_wire,
)
from ultraplane.policies.powerbook import PowerBook
from ultraplane.policies.powerbudgets import PowerPolicy


def test_the_resource_fields_become_the_core_spec_and_back() -> None:
    wire = {"watts": 250_000, "ultraServers": {"blocks": ["block-000"],
                                               "matchLabels": {"row": "3"}},
            "parent": "hall", "policy": "Measured", "margin": 0.1}
    spec = budget_spec("row-3", wire)
    assert (spec.name, spec.watts, spec.blocks, spec.labels, spec.parent, spec.policy,
            spec.margin) == ("row-3", 250_000, ("block-000",), {"row": "3"}, "hall",
                             PowerPolicy.MEASURED, 0.1)
    assert budget_spec("row-3", budget_wire(spec)) == spec


def test_statuses_say_the_predicted_draw_and_headroom_of_an_idle_fleet() -> None:
    specs = budget_specs([{"name": "hall", "watts": 100_000}])
    book = PowerBook(specs)
    book.bind(Allocator(build_fleet("trn3-gen2", 2)))
    status = budget_statuses(book, {"hall": 4})["hall"]
    idle = 2 * 144 * 300.0  # the assumed idle draw of two Gen2 UltraServers
    assert status == {"predictedWatts": idle, "headroomWatts": 100_000 - idle,
                      "ultraServers": 2, "poweredDown": 0, "capped": [],
                      "observedGeneration": 4}


@pytest.mark.parametrize(("data", "says"), [
    ([{"name": "a", "watts": 0}], "power budget a: watts"),
    ([{"name": "a", "watts": 10, "policy": "Sometimes"}], "power budget a: policy"),
    ([{"name": "a", "watts": 10, "parent": "nope"}], "parent nope is not a budget"),
    ([{"name": "a", "watts": 10}, {"name": "a", "watts": 20}], "defined twice"),
    ([{"name": "a", "watts": 10, "colour": "red"}], "colour"),
    ({"name": "a"}, "non-empty YAML list"),
])
def test_a_bad_budget_is_one_sentence(data: object, says: str) -> None:
    with pytest.raises(InvalidBudgetError, match=says):
        budget_specs(data)

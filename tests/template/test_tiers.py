"""The tiers are named once (mcp_backend.tiers): the template's tier parameters, allowed values and limit
variables name those tiers and no others."""

from __future__ import annotations

import re

from mcp_backend.config import TierLimits
from mcp_backend.tiers import TIERS
from tests.template.test_invariants import EXPANDED, RESOURCES

LIMIT_VARIABLE = re.compile(r"LIMIT_([A-Z]+)_([A-Z_]+)")


def test_every_parameter_that_offers_tiers_offers_exactly_the_tiers():
    # Given the template's parameters
    parameters = EXPANDED["Parameters"]

    # When those whose allowed values name a tier are read
    offered = {
        name: tuple(spec["AllowedValues"])
        for name, spec in parameters.items()
        if set(spec.get("AllowedValues", ())) & set(TIERS)
    }

    # Then each offers the tiers, in their order, and nothing else
    assert all(values == TIERS for values in offered.values()), offered


def test_every_limit_variable_names_a_tier_and_a_limit():
    # Given every environment variable LIMIT_<TIER>_<LIMIT> a function of the template gets
    variables = [
        name
        for resource in RESOURCES.values()
        for name in resource.get("Properties", {}).get("Environment", {}).get("Variables", {})
        if name.startswith("LIMIT_")
    ]
    assert variables

    # When each is split into its tier and its limit
    parsed = [LIMIT_VARIABLE.fullmatch(name) for name in variables]

    # Then the tier is one of the tiers and the limit one of TierLimits' fields
    assert all(match is not None for match in parsed), variables
    assert {m.group(1).lower() for m in parsed if m} <= set(TIERS)
    assert {m.group(2).lower() for m in parsed if m} <= set(TierLimits.model_fields)

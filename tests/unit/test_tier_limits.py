"""A tier's row of the limits table: what the settings say, for each settings object, whichever was asked first."""

from __future__ import annotations

from mcp_backend.config import TierLimitSettings


def test_each_settings_object_gets_its_own_values_for_a_tier():
    # Given two settings that differ only in the pro tier's daily jobs, and a third equal to the first
    first = TierLimitSettings(limit_pro_daily_jobs=7)
    second = TierLimitSettings(limit_pro_daily_jobs=9)
    third = TierLimitSettings(limit_pro_daily_jobs=7)

    # When each is asked for its pro row (the first twice)
    rows = [first.tier_limits("pro"), second.tier_limits("pro"), third.tier_limits("pro"), first.tier_limits("pro")]

    # Then each row carries its own settings' values, and asking changes neither the settings nor their equality
    assert [row.daily_jobs for row in rows] == [7, 9, 7, 7]
    assert rows[0].requests_per_minute == first.limit_pro_requests_per_minute
    assert first == third and first != second


def test_an_unknown_tier_gets_the_lowest_tiers_row():
    # Given settings with a distinct free tier
    settings = TierLimitSettings(limit_free_batch_items=4)

    # Then a tier the table does not name, or an attribute's name, gets the free tier's row
    for tier in ("gold", "", "__class__", "limit_pro"):
        assert settings.tier_limits(tier) == settings.tier_limits("free")
    assert settings.tier_limits("free").batch_items == 4

"""The tiers a caller can be on, named once: every limit, key, claim and template parameter uses these names.

Ordered lowest first: the lowest is what a caller whose tier is unknown gets (fail closed), and the highest
mapped group wins when several map to a tier (authorization/upstream.py).
"""

from __future__ import annotations

from typing import Literal, get_args

Tier = Literal["free", "pro", "internal"]
TIERS: tuple[Tier, ...] = get_args(Tier)
LOWEST_TIER: Tier = TIERS[0]

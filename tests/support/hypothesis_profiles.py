"""Hypothesis example budgets by profile: ``ci`` runs the suite's full counts, ``dev`` a quarter
of them for the inner loop.

The profile is ``HYPOTHESIS_PROFILE`` when that is set, else ``ci`` under ``CI=true`` and ``dev``
otherwise (``pytest --hypothesis-profile NAME`` overrides all of it). ``tests/conftest.py``
loads it before any test module is imported.

A test without a budget of its own gets the profile's ``max_examples``. A test that names one
writes ``max_examples=examples(N)``: exactly N under ``ci`` (the count CI has always run, so no
test is weaker there), N scaled by the loaded profile's ``max_examples`` otherwise.
"""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from hypothesis import settings
from hypothesis.errors import InvalidArgument

from tests.support.servers import in_ci

CI = "ci"
DEV = "dev"
PROFILE_VARIABLE = "HYPOTHESIS_PROFILE"

# Hypothesis's default, which every test without a budget of its own ran before the profiles.
CI_EXAMPLES = 100
DEV_EXAMPLES = 25


def register_profiles() -> None:
    """Register ``ci`` and ``dev`` (idempotent: registering again replaces them unchanged)."""
    # ``ci`` keeps hypothesis's own CI profile (derandomized, no deadline, no example database),
    # which is what ran under CI=true before; only the count is pinned.
    settings.register_profile(CI, settings.get_profile("ci"), max_examples=CI_EXAMPLES)
    settings.register_profile(DEV, settings.get_profile("default"), max_examples=DEV_EXAMPLES)


def profile_name(environ: Mapping[str, str]) -> str:
    """The profile to load for this environment (``HYPOTHESIS_PROFILE`` wins over ``CI``)."""
    chosen = environ.get(PROFILE_VARIABLE, "").strip()
    if chosen:
        return chosen
    return CI if in_ci(environ) else DEV


def load_profile(environ: Mapping[str, str]) -> str:
    """Register the profiles, load the one ``environ`` asks for and return its name.

    An unknown name in ``HYPOTHESIS_PROFILE`` is a usage error naming it (pytest prints that one
    line): a typo must not quietly run another budget.
    """
    register_profiles()
    name = profile_name(environ)
    try:
        settings.load_profile(name)
    except InvalidArgument:
        raise pytest.UsageError(
            f"{PROFILE_VARIABLE}={name}: no such hypothesis profile (this suite has {CI} and {DEV})"
        ) from None
    return name


def examples(ci_count: int) -> int:
    """A test's own example budget: ``ci_count`` under ``ci``, scaled to the loaded profile.

    Read when the decorator runs (at import of the test module), so the profile must be loaded
    first; ``tests/conftest.py`` does that. Never below 1.
    """
    return max(1, ci_count * settings().max_examples // CI_EXAMPLES)

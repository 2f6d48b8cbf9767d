"""Hypothesis profiles for the property tiers.

- ``ci`` (default): derandomized, so a run is reproducible; enough examples that each law sees
  thousands of cases over the suite.
- ``slow``: many more random examples, for a long local run:
  ``HYPOTHESIS_PROFILE=slow make test``.
- ``dev``: few examples, for quick iteration.
"""

import os

from hypothesis import HealthCheck, settings

_common = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow]}
settings.register_profile("ci", max_examples=500, derandomize=True, **_common)
settings.register_profile("slow", max_examples=20000, **_common)
settings.register_profile("dev", max_examples=50, **_common)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

"""Retrying a failed delivery: exponential backoff with jitter, up to a cap."""
from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class RetryPolicy:
    max_attempts: int = 5  # attempts per refresh of a sink (1 = no retry)
    initial_seconds: float = 0.2  # the first wait
    max_seconds: float = 10.0  # the cap on one wait

    def delay(self, failed_attempts: int, rng: random.Random | None = None) -> float:
        """How long to wait after `failed_attempts` (>= 1) consecutive failures: the exponential step
        initial * 2^(n-1), capped, with "equal jitter" (half fixed, half uniformly random), so that
        sinks failing together do not retry in lockstep yet every wait still grows."""
        step = min(self.max_seconds, self.initial_seconds * 2 ** max(0, failed_attempts - 1))
        return step / 2 + (rng or random).uniform(0, step / 2)

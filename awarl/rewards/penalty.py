"""The dynamic refusal penalty P_t (docs/rewards.md, "Formulas").

Per generation batch t: ``E_t = observed − expected`` refusal rate, smoothed as
``Ē_t = β·Ē_{t−1} + (1 − β)·E_t`` (Ē_0 = 0), then quantized in steps of τ with a dead zone
below τ: ``P_t = sign(Ē_t) · min(P_max, δ · floor(|Ē_t| / τ))``. Over-refusal makes P_t > 0, so
abstaining pays less; under-refusal makes it negative. The state is saved with checkpoints.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

# |Ē|/τ is compared after adding this slack so that e.g. 0.15 / 0.05 = 2.9999999999999996
# still counts as three whole steps; it is far below any error a batch rate can resolve.
_STEP_SLACK = 1e-9


@dataclass
class PenaltyState:
    """What `DynamicPenalty` carries from batch to batch."""

    error_ema: float = 0.0
    penalty: float = 0.0
    last_error: float = 0.0
    step: int = 0


class DynamicPenalty:
    """EMA of the refusal-rate error, quantized into a bounded penalty.

    >>> pen = DynamicPenalty(beta=0.0, tau=0.05, delta=0.1, max_penalty=1.0)
    >>> pen.update(observed_rate=0.5, expected_rate=0.3)   # E = 0.2 -> 4 steps of tau
    0.4
    >>> pen.update(observed_rate=0.31, expected_rate=0.3)  # inside the dead zone
    0.0
    """

    def __init__(self, beta: float = 0.9, tau: float = 0.05, delta: float = 0.1, max_penalty: float = 1.0):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        if not tau > 0.0:
            raise ValueError(f"tau must be > 0, got {tau!r}")
        if not delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {delta!r}")
        if not max_penalty >= 0.0:
            raise ValueError(f"max_penalty must be >= 0, got {max_penalty!r}")
        self.beta, self.tau, self.delta, self.max_penalty = beta, tau, delta, max_penalty
        self.state = PenaltyState()

    @property
    def value(self) -> float:
        """The current penalty P_t (0 before the first update)."""
        return self.state.penalty

    def quantize(self, error_ema: float) -> float:
        """``sign(Ē) · min(P_max, δ · floor(|Ē| / τ))``."""
        steps = math.floor(abs(error_ema) / self.tau + _STEP_SLACK)
        magnitude = min(self.max_penalty, self.delta * steps)
        return math.copysign(magnitude, error_ema) if magnitude > 0 else 0.0

    def update(self, observed_rate: float, expected_rate: float) -> float:
        """Fold one generation batch's rates into the EMA and return the new penalty P_t.

        Call exactly once per generation batch, with the rates of the global batch.
        """
        for name, rate in (("observed_rate", observed_rate), ("expected_rate", expected_rate)):
            if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {rate!r}")
        error = observed_rate - expected_rate
        ema = self.beta * self.state.error_ema + (1.0 - self.beta) * error
        self.state = PenaltyState(error_ema=ema, penalty=self.quantize(ema), last_error=error,
                                  step=self.state.step + 1)
        return self.state.penalty

    def state_dict(self) -> dict[str, Any]:
        """Plain numbers (JSON-able), saved with every checkpoint."""
        return asdict(self.state)

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore a `state_dict`; missing or non-numeric entries are an error naming the key."""
        expected = asdict(PenaltyState())
        unknown = set(state) - set(expected)
        if unknown:
            raise ValueError(f"penalty state: unknown keys {sorted(unknown)}; expected {sorted(expected)}")
        values: dict[str, Any] = {}
        for key, default in expected.items():
            if key not in state:
                raise ValueError(f"penalty state: missing key '{key}'")
            value = state[key]
            if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
                raise ValueError(f"penalty state: '{key}' must be a finite number, got {value!r}")
            values[key] = type(default)(value)
        self.state = PenaltyState(**values)

    def __repr__(self) -> str:
        return (f"DynamicPenalty(beta={self.beta}, tau={self.tau}, delta={self.delta}, "
                f"max_penalty={self.max_penalty}, state={self.state})")

"""The dynamic refusal penalty P_t (docs/rewards.md, "Formulas").

Per generation batch t: ``E_t = observed − expected`` refusal rate, smoothed as
``Ē_t = β·Ē_{t−1} + (1 − β)·E_t`` (Ē_0 = 0), then quantized in steps of τ with a dead zone
below τ: ``P_t = sign(Ē_t) · min(P_max, δ · floor(|Ē_t| / τ))``. Over-refusal makes P_t > 0, so
abstaining pays less; under-refusal makes it negative. The state is saved with checkpoints.

Anti-windup (awarl's guard, docs/rewards.md "Guards"): with the cap on, a negative P_t cannot raise
the abstain reward of a query already at the cap, yet the EMA keeps integrating the error and the
controller then takes many batches to come back once the error flips. Two forms:

- ``min_penalty`` (``anti_windup: bound``): Ē is clamped at the edge of the step that gives
  ``min_penalty``, ``Ē ≥ −τ·k`` with ``k = floor(|min_penalty| / δ)``, so P_t ≥ min_penalty and,
  once the error turns non-negative, P_t ≥ 0 after at most `recovery_batches` batches (7 with
  β 0.9, τ 0.05, δ 0.1, min_penalty −0.2);
- ``hold_negative`` (``anti_windup: freeze``, decided by the caller per batch): Ē does not move
  further down (conditional integration), so a negative P_t stops growing.
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

    def __init__(self, beta: float = 0.9, tau: float = 0.05, delta: float = 0.1, max_penalty: float = 1.0,
                 min_penalty: float | None = None):
        if not 0.0 <= beta < 1.0:
            raise ValueError(f"beta must be in [0, 1), got {beta!r}")
        if not tau > 0.0:
            raise ValueError(f"tau must be > 0, got {tau!r}")
        if not delta >= 0.0:
            raise ValueError(f"delta must be >= 0, got {delta!r}")
        if not max_penalty >= 0.0:
            raise ValueError(f"max_penalty must be >= 0, got {max_penalty!r}")
        if min_penalty is not None and not -max_penalty <= min_penalty <= 0.0:
            raise ValueError(f"min_penalty must be in [-max_penalty, 0], got {min_penalty!r}")
        self.beta, self.tau, self.delta, self.max_penalty = beta, tau, delta, max_penalty
        self.min_penalty = min_penalty
        self.state = PenaltyState()

    @property
    def min_error(self) -> float | None:
        """The lowest Ē under ``min_penalty``: the edge of the deepest step whose P_t is ≥ min_penalty."""
        if self.min_penalty is None or self.delta == 0.0:
            return None
        return -self.tau * math.floor(-self.min_penalty / self.delta + _STEP_SLACK)

    def recovery_batches(self, error_ema: float | None = None) -> int:
        """The most generation batches, once every error is non-negative, until P_t ≥ 0 again, starting
        from ``error_ema`` (default: the deepest Ē the bound allows, else the current one). Ē decays at
        least as β^n, and P_t ≥ 0 once |Ē| < τ: the first n with (|Ē| / τ)·β^n < 1.

        >>> DynamicPenalty(beta=0.9, tau=0.05, delta=0.1, min_penalty=-0.2).recovery_batches()
        7
        >>> DynamicPenalty(beta=0.9, tau=0.05).recovery_batches(-0.5)
        22
        """
        if error_ema is None:
            error_ema = self.min_error if self.min_error is not None else self.state.error_ema
        k = -error_ema / self.tau
        if k < 1.0 - _STEP_SLACK:
            return 0
        if self.beta == 0.0:
            return 1
        return math.floor(math.log(k) / math.log(1.0 / self.beta) + _STEP_SLACK) + 1

    @property
    def value(self) -> float:
        """The current penalty P_t (0 before the first update)."""
        return self.state.penalty

    def quantize(self, error_ema: float) -> float:
        """``sign(Ē) · min(P_max, δ · floor(|Ē| / τ))``."""
        steps = math.floor(abs(error_ema) / self.tau + _STEP_SLACK)
        magnitude = min(self.max_penalty, self.delta * steps)
        return math.copysign(magnitude, error_ema) if magnitude > 0 else 0.0

    def update(self, observed_rate: float, expected_rate: float, *, hold_negative: bool = False) -> float:
        """Fold one generation batch's rates into the EMA and return the new penalty P_t.

        Call exactly once per generation batch, with the rates of the global batch. ``hold_negative``:
        a negative Ē does not move further down this batch (anti-windup, freeze form).
        """
        for name, rate in (("observed_rate", observed_rate), ("expected_rate", expected_rate)):
            if not (math.isfinite(rate) and 0.0 <= rate <= 1.0):
                raise ValueError(f"{name} must be in [0, 1], got {rate!r}")
        error = observed_rate - expected_rate
        previous = self.state.error_ema
        ema = self.beta * previous + (1.0 - self.beta) * error
        if hold_negative and previous < 0.0 and ema < previous:
            ema = previous
        if self.min_error is not None:
            ema = max(ema, self.min_error)
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
                f"max_penalty={self.max_penalty}, min_penalty={self.min_penalty}, state={self.state})")

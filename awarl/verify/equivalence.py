"""When two translations say the same thing (the LLM translator's vote counting).

Kept apart from the reasoner so that the translators, which need it, and the reasoner, which
needs the translators, do not import each other.
"""

from __future__ import annotations

from collections.abc import Sequence

import z3

from awarl.verify.findings import Statement, Translation
from awarl.verify.policy import Policy


def equivalent(policy: Policy, a: Translation, b: Translation, timeout_ms: int = 1000) -> bool:
    """Whether two translations say the same thing: premises equivalent and claims equivalent.

    Pure logic over the policy's variables (the rules are not assumed), so "tenure ≥ 12" and
    "not tenure < 12" agree while two readings the policy merely links do not. A solver
    ``unknown`` counts as "not shown equivalent".
    """
    ctx = policy.ctx

    def conj(statements: Sequence[Statement]) -> z3.BoolRef:
        parts = [policy.parse(s.logic) for s in statements]
        return z3.And(*parts) if parts else z3.BoolVal(True, ctx)

    s = z3.Solver(ctx=ctx)
    s.set("random_seed", 0)
    s.set("timeout", timeout_ms)
    pa, pb, ca, cb = conj(a.premises), conj(b.premises), conj(a.claims), conj(b.claims)
    s.add(z3.Or(pa != pb, ca != cb))
    return s.check() == z3.unsat

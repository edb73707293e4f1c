"""Automated-reasoning checks on Z3 and citation checks for the verify-and-rewrite loop.

    from awarl.verify.policy import load_policy
    from awarl.verify.reasoner import check
    from awarl.verify.translate import PatternTranslator
    from awarl.verify.findings import aggregate

    policy = load_policy("configs/policies/pricing.yaml")
    findings = check(policy, question, answer, PatternTranslator())
    result = aggregate(findings)          # one Result for the loop, or None

Modules: `findings` (the seven results, Bedrock shapes), `smt` (reading and sort-checking
SMT-LIB terms), `policy` (YAML / Bedrock JSON loader), `equivalence` (when two translations agree),
`reasoner` (the decision procedure), `translate` (pattern and LLM translators), `citations`
(fabricated / unsupported citations, corrections, review queue), `lint`, `policy_tests`, `cli`.
Imports run one way: smt ← policy ← equivalence ← translate ← reasoner ← policy_tests.
Nothing here imports torch; the package itself imports nothing heavy, so ``awarl --help`` stays fast.
"""

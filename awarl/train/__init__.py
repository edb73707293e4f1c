"""Training: cold-start SFT and AWA-RL GRPO on TRL (docs/training.md).

`config` (recipes), `sft`, `grpo` (`main(config)`), `callbacks` (penalty state, summary line,
logging backends), `export`, `sweep`, `cli`. torch and TRL are imported inside functions only.
"""

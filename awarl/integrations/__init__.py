"""awarl's parts where other stacks load them (docs/integrations.md).

- `awarl.integrations.trl`: the AWA and citation rewards as plain reward functions for TRL's own
  CLI (``trl grpo --reward_funcs awarl.rewards.awa_reward``), settings read from an awarl recipe;
- `awarl.integrations.hub`: p_i tables and evaluation runs as Hugging Face ``datasets`` datasets
  with a dataset card, and the model-index of an exported agent's card;
- `awarl.integrations.verifiers`: a ``verifiers`` (0.4) taskset with the search tool, the records
  with their p_i column, and awarl's reward and metrics (the optional ``verifiers`` extra).

Nothing here is imported by the rest of awarl, except the TRL names that `awarl.rewards` looks up
when TRL asks for them.
"""

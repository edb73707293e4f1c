"""The verify-and-rewrite chatbot: the trained agent behind automated-reasoning and citation checks.

    awarl chat serve                                   # the world demo's agent (or validate-only)
    awarl chat serve --config configs/chat/pricing.yaml

Modules: `thread` (the thread and its states), `parser` (DECISION replies), `prompts` (+ the
``prompts/`` templates), `generate` (the agent through the rollout runner; a scripted generator),
`validate` (one check of one answer), `loop` (the state machine), `store` (SQLite), `audit`
(keyed hash-chained JSON lines), `manager` (workers, locking, recovery, reviews), `errors` (what can go
wrong, without HTTP), `auth` (tokens and the Host check), `config`, `app` (FastAPI: routes, the one
error -> status table, the web UI in ``static/``), `cli`. Importing this package imports neither torch nor
FastAPI.
"""

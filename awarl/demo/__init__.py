"""``awarl demo``: watch AWA-RL work on a laptop CPU, end to end, on a synthetic world.

Stages, each resumable (a finished stage is skipped, GRPO continues from its last checkpoint,
p_i and evaluation from their last finished question):

1. ``world``   — `awarl.data.world`: a seeded fictional world, its MuSiQue-format splits read by
   the MuSiQue adapter (records + corpus), its verifier policy and policy tests;
2. ``model``   — a 2-layer Qwen2-shaped model and a tokenizer trained on the world's text (offline);
3. ``sft``     — warm start on gold two-search trajectories made with the real search tool;
4. ``p_i``     — capability of the SFT checkpoint: K sampled rollouts per question, on the RL split
   (the reward needs it) and on the held-out split (the calibration plot needs it);
5. ``grpo``    — TRL GRPO with the search tool, once per arm of the recipe's ``arms:`` (the AWA
   reward and the accuracy-only ``none``), each from the same SFT checkpoint and p_i;
6. ``eval``    — greedy evaluation of the SFT checkpoint ("before RL") and of every arm ("after
   RL") on the held-out questions (persons never seen in SFT or RL), reported side by side;
7. ``report``  — ``report.md``, ``metrics.json`` and the plots.

Every stage runs under the recipe's one ``rollout:`` section (`RolloutSettings`), so p_i, training
and evaluation measure the same agent. The terminal shows one progress display; everything the
libraries print goes to ``demo.log``. ``demo.json`` is the manifest the chatbot reads.

Modules: `recipe` (the recipe, ``--quick`` / ``--set``, the settings a folder was started with),
`run` (the folder's paths, the display and the stages), `parallel` (a stage's jobs in worker
processes, ``--workers``), `report` (metrics.json and report.md),
`plots`, and `cli` (the ``awarl demo`` command).
"""

from awarl.demo.cli import demo_command
from awarl.demo.recipe import DEFAULT_RECIPE, DemoError, DemoRecipe, check_settings
from awarl.demo.report import expected_refusal, outcome_rows, refusal_by_p
from awarl.demo.run import MANIFEST, STAGES, Demo, DemoPaths, Display, run_demo, summary_fields

__all__ = ["DEFAULT_RECIPE", "MANIFEST", "STAGES", "Demo", "DemoError", "DemoPaths", "DemoRecipe", "Display",
           "check_settings", "demo_command", "expected_refusal", "outcome_rows", "refusal_by_p", "run_demo",
           "summary_fields"]

"""`scripts/bench_search_recall.py` on the shipped samples: every scorer finds the same top 5."""

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _script():
    sys.path.insert(0, str(ROOT / "scripts"))
    spec = importlib.util.spec_from_file_location("bench_search_recall", ROOT / "scripts" / "bench_search_recall.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_every_scorer_has_the_exhaustive_top_k_and_recall_on_the_samples(tmp_path):
    bench = _script()
    records, passages = bench.load_samples()
    records = [r for r in records if r.answerable and r.supporting]
    res = bench.run(passages, records, 5, tmp_path / "index")
    scorers = res["scorers"]
    assert set(scorers) == set(bench.SCORERS) and res["questions"] == len(records) > 100
    exhaustive = scorers["exhaustive"]
    assert 0.5 < exhaustive["any"] <= 1.0 and 0.0 < exhaustive["all"] <= exhaustive["any"]
    for name in ("block-max (default)", "MaxScore, no blocks"):
        assert scorers[name]["same_ids_as_exhaustive"] == 1.0
        assert (scorers[name]["any"], scorers[name]["all"]) == (exhaustive["any"], exhaustive["all"])
    assert scorers["bm25s"]["any"] == exhaustive["any"]  # same scores; only its tie order differs

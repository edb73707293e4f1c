"""Search fixtures: a BM25 index over the shipped HotpotQA sample, saved once per session."""

from __future__ import annotations

import pytest

from awarl.search.bm25 import BM25Index


@pytest.fixture(scope="session")
def hotpot_index(hotpot_prepared) -> BM25Index:
    _, passages = hotpot_prepared
    return BM25Index.build(passages)


@pytest.fixture(scope="session")
def hotpot_index_dir(hotpot_index, tmp_path_factory):
    return hotpot_index.save(tmp_path_factory.mktemp("hotpot-bm25"))

"""Dense retrieval (extra ``dense``): a sentence-transformers encoder and a faiss index.

Passages and queries are embedded with the same encoder, E5-style: ``"passage: "`` before
each passage and ``"query: "`` before each query (both configurable; set them to ``""`` for
encoders trained without prefixes). Embeddings are L2-normalised, so inner product is cosine
similarity. ``flat`` is exact search; ``hnsw`` is faiss's graph index, approximate and much
faster on large corpora. Closed scope scores only the allowed passages against their stored
embeddings, exactly, whatever the index type.

The encoder is any local sentence-transformers folder; nothing is downloaded at run time.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from awarl.data.records import DataError, Passage
from awarl.errors import ConfigError
from awarl.search.folder import check_passage_count, read_index_meta, staged, write_meta
from awarl.search.retriever import Hit, SearchError, check_request
from awarl.search.store import PassageStore

FAISS_FILE = "faiss.index"
EMBEDDINGS_FILE = "embeddings.npy"
INDEX_TYPES = ("flat", "hnsw")


@dataclass(frozen=True)
class DenseSettings:
    """How passages are embedded and indexed; saved with the index."""

    encoder: str  # local folder of a sentence-transformers model
    index_type: str = "flat"  # flat (exact) or hnsw (approximate, faster on large corpora)
    query_prefix: str = "query: "  # E5 convention; "" for encoders trained without prefixes
    passage_prefix: str = "passage: "
    batch_size: int = 64  # encoding batch size
    hnsw_m: int = 32  # HNSW graph degree
    hnsw_ef_construction: int = 80  # HNSW build-time beam width
    hnsw_ef_search: int = 64  # HNSW search-time beam width (recall vs speed)
    device: str = "cpu"  # torch device for the encoder

    def __post_init__(self) -> None:
        if self.index_type not in INDEX_TYPES:
            raise ConfigError(f"unknown dense index type {self.index_type!r}; choose one of {', '.join(INDEX_TYPES)}")
        if self.batch_size < 1 or self.hnsw_m < 2 or self.hnsw_ef_search < 1 or self.hnsw_ef_construction < 1:
            raise ConfigError("batch_size, hnsw_ef_* must be >= 1 and hnsw_m >= 2")


def _require_extra() -> tuple[Any, Any]:
    try:
        import faiss
        import sentence_transformers
    except ImportError as exc:
        raise ConfigError(
            f"dense retrieval needs the 'dense' extra ({exc.name} is missing): pip install 'awarl[dense]'"
        ) from None
    return faiss, sentence_transformers


def load_encoder(path: str, device: str = "cpu") -> Any:
    """A sentence-transformers model from a local folder (never from the network)."""
    _, st = _require_extra()
    if not Path(path).is_dir():
        raise FileNotFoundError(
            f"encoder {path!r} is not a local folder; save a sentence-transformers model there first "
            "(awarl never downloads models at run time)"
        )
    return st.SentenceTransformer(str(path), device=device, local_files_only=True)


class DenseIndex:
    """A dense index over passages; implements `awarl.search.retriever.Retriever`."""

    kind = "dense"

    def __init__(self, faiss_index: Any, embeddings: np.ndarray, store: PassageStore, settings: DenseSettings, encoder: Any = None):
        if faiss_index.ntotal != len(store) or len(embeddings) != len(store):
            raise ValueError(f"faiss holds {faiss_index.ntotal} vectors, embeddings {len(embeddings)}, passages {len(store)}")
        self._faiss = faiss_index
        self._embeddings = embeddings
        self.store = store
        self.settings = settings
        self._encoder = encoder if encoder is not None else load_encoder(settings.encoder, settings.device)
        if settings.index_type == "hnsw":
            faiss_index.hnsw.efSearch = settings.hnsw_ef_search

    @classmethod
    def build(cls, passages: Sequence[Passage], settings: DenseSettings, show_progress: bool = False,
              source: str | Path = "the corpus") -> "DenseIndex":
        faiss, _ = _require_extra()
        if not passages:
            raise DataError(source, "-", "no passages: cannot index an empty corpus")
        encoder = load_encoder(settings.encoder, settings.device)
        texts = [settings.passage_prefix + (f"{p.title} {p.text}" if p.title else p.text) for p in passages]
        emb = _encode(encoder, texts, settings.batch_size, show_progress)
        dim = emb.shape[1]
        if settings.index_type == "flat":
            index = faiss.IndexFlatIP(dim)
        else:
            index = faiss.IndexHNSWFlat(dim, settings.hnsw_m, faiss.METRIC_INNER_PRODUCT)
            index.hnsw.efConstruction = settings.hnsw_ef_construction
        index.add(emb)
        return cls(index, emb, PassageStore.from_passages(passages, source), settings, encoder)

    def save(self, out_dir: str | Path) -> Path:
        """Write the index folder; an existing index there is replaced atomically (`awarl.search.folder`)."""
        faiss, _ = _require_extra()
        with staged(out_dir) as out:
            faiss.write_index(self._faiss, str(out / FAISS_FILE))
            np.save(out / EMBEDDINGS_FILE, np.asarray(self._embeddings, dtype=np.float32))
            self.store.save(out)
            write_meta(out, self.kind, len(self), asdict(self.settings))
        return Path(out_dir)

    @classmethod
    def load(cls, index_dir: str | Path, mmap: bool = True, encoder: str | None = None, device: str | None = None) -> "DenseIndex":
        """Open a saved index. ``encoder`` / ``device`` override the saved ones (same model, moved)."""
        faiss, _ = _require_extra()
        index_dir = Path(index_dir)
        meta, settings = read_index_meta(index_dir, cls.kind, DenseSettings)
        settings = replace(settings, encoder=encoder or settings.encoder, device=device or settings.device)
        index = faiss.read_index(str(index_dir / FAISS_FILE))
        emb = np.load(index_dir / EMBEDDINGS_FILE, mmap_mode="r" if mmap else None)
        store = PassageStore.load(index_dir, mmap_text=mmap)
        check_passage_count(index_dir, meta, len(store))
        return cls(index, emb, store, settings)

    def __len__(self) -> int:
        return len(self.store)

    def get_passage(self, pid: str) -> Passage:
        return self.store.get(pid)

    def search(self, queries: list[str], k: int, allowed: list[list[str]] | None = None) -> list[list[Hit]]:
        check_request(queries, k, allowed)
        if not queries:
            return []
        q = _encode(self._encoder, [self.settings.query_prefix + text for text in queries], self.settings.batch_size, False)
        if q.shape[1] != self._embeddings.shape[1]:
            raise SearchError(f"encoder gives {q.shape[1]}-dim vectors, the index holds {self._embeddings.shape[1]}-dim ones")
        if allowed is None:
            scores, rows = self._faiss.search(q, min(k, len(self)))
            return [self._hits(r, s) for r, s in zip(rows, scores)]
        out = []
        for vec, ids in zip(q, allowed):
            rows = self.store.rows_for(ids)
            sims = np.asarray(self._embeddings[rows]) @ vec
            order = np.lexsort((rows, -sims))[:k]
            out.append(self._hits(rows[order], sims[order]))
        return out

    def _hits(self, rows: np.ndarray, scores: np.ndarray) -> list[Hit]:
        return [Hit(self.store.row(int(r)), float(s)) for r, s in zip(rows, scores) if r >= 0]


def _encode(encoder: Any, texts: list[str], batch_size: int, show_progress: bool) -> np.ndarray:
    emb = encoder.encode(
        texts, batch_size=batch_size, normalize_embeddings=True, convert_to_numpy=True, show_progress_bar=show_progress
    )
    return np.ascontiguousarray(emb, dtype=np.float32)

"""Dense retrieval with a tiny sentence-transformers encoder built here, offline (extra ``dense``)."""

from __future__ import annotations

import pytest

pytest.importorskip("faiss", reason="dense retrieval needs the 'dense' extra (faiss-cpu)")
pytest.importorskip("sentence_transformers", reason="dense retrieval needs the 'dense' extra (sentence-transformers)")

from awarl.search.dense import DenseIndex, DenseSettings  # noqa: E402
from awarl.search.index import load_index  # noqa: E402
from awarl.search.retriever import Retriever  # noqa: E402


def _build_tiny_encoder(out_dir, texts):
    """A 1-layer BERT with a WordPiece vocabulary trained on ``texts``, saved as a
    sentence-transformers folder (mean pooling). Random weights: identical texts still get
    identical vectors, which is what these tests rely on."""
    import torch
    from sentence_transformers import SentenceTransformer
    from sentence_transformers.sentence_transformer.modules import Pooling, Transformer
    from tokenizers import Tokenizer, models, normalizers, pre_tokenizers, processors, trainers
    from transformers import BertConfig, BertModel, PreTrainedTokenizerFast

    torch.manual_seed(0)
    specials = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    tok = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tok.normalizer = normalizers.BertNormalizer(lowercase=True)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.train_from_iterator(texts, trainers.WordPieceTrainer(vocab_size=2000, special_tokens=specials, show_progress=False))
    tok.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", special_tokens=[("[CLS]", tok.token_to_id("[CLS]")), ("[SEP]", tok.token_to_id("[SEP]"))]
    )
    hf_tok = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]", cls_token="[CLS]",
                                     sep_token="[SEP]", mask_token="[MASK]", model_max_length=256)
    config = BertConfig(vocab_size=len(hf_tok), hidden_size=48, num_hidden_layers=1, num_attention_heads=2,
                        intermediate_size=96, max_position_embeddings=256)
    hf_dir = out_dir / "hf"
    BertModel(config).save_pretrained(hf_dir)
    hf_tok.save_pretrained(hf_dir)
    transformer = Transformer(str(hf_dir), max_seq_length=256)
    model = SentenceTransformer(modules=[transformer, Pooling(transformer.get_embedding_dimension(), "mean")], device="cpu")
    model.save(str(out_dir / "st"))
    return str(out_dir / "st")


@pytest.fixture(scope="module")
def corpus(hotpot_prepared):
    records, passages = hotpot_prepared
    return records, passages[:120]


@pytest.fixture(scope="module")
def encoder_dir(corpus, tmp_path_factory):
    _, passages = corpus
    return _build_tiny_encoder(tmp_path_factory.mktemp("tiny-encoder"), [f"{p.title} {p.text}" for p in passages])


def _self_retrieval(index, passages) -> float:
    texts = [f"{p.title} {p.text}" for p in passages]
    results = index.search(texts, 1)
    return sum(hits[0].passage.id == p.id for hits, p in zip(results, passages)) / len(passages)


@pytest.mark.parametrize("index_type,floor", [("flat", 1.0), ("hnsw", 0.9)])
def test_build_search_and_round_trip(corpus, encoder_dir, tmp_path, index_type, floor):
    _, passages = corpus
    settings = DenseSettings(encoder=encoder_dir, index_type=index_type, query_prefix="", passage_prefix="")
    index = DenseIndex.build(passages, settings)
    assert isinstance(index, Retriever) and len(index) == len(passages)
    # with no prefixes a passage's own text embeds identically, so it must come first
    assert _self_retrieval(index, passages) >= floor
    loaded = load_index(index.save(tmp_path / "dense"))
    assert isinstance(loaded, DenseIndex) and loaded.settings == settings
    q = [passages[3].text, "a query about music"]
    assert [[h.passage.id for h in r] for r in loaded.search(q, 4)] == [[h.passage.id for h in r] for r in index.search(q, 4)]
    assert loaded.get_passage(passages[5].id) == passages[5]


def test_closed_scope_is_exact_and_restricted(corpus, encoder_dir):
    records, passages = corpus
    known = {p.id for p in passages}
    rec = next(r for r in records if set(r.passages) <= known)
    index = DenseIndex.build(passages, DenseSettings(encoder=encoder_dir, index_type="hnsw"))
    [hits] = index.search([rec.question], 5, allowed=[rec.passages])
    assert len(hits) == 5 and {h.passage.id for h in hits} <= set(rec.passages)
    scores = [h.score for h in hits]
    assert scores == sorted(scores, reverse=True)


def test_e5_prefixes_are_applied(corpus, encoder_dir):
    _, passages = corpus
    index = DenseIndex.build(passages[:20], DenseSettings(encoder=encoder_dir, query_prefix="query: ", passage_prefix="passage: "))
    seen: list[str] = []
    real_encode = index._encoder.encode

    def recording_encode(texts, **kw):
        seen.extend(texts)
        return real_encode(texts, **kw)

    index._encoder.encode = recording_encode
    index.search(["who composed the score"], 2)
    assert seen == ["query: who composed the score"]
    # passages were embedded with their prefix: re-embedding "passage: <title> <text>" gives the stored vector
    p = passages[0]
    vec = index._encoder.encode([f"passage: {p.title} {p.text}"], normalize_embeddings=True)[0]
    assert float(vec @ index._embeddings[0]) == pytest.approx(1.0, abs=1e-4)


def test_missing_encoder_is_a_clear_error(corpus, tmp_path):
    _, passages = corpus
    with pytest.raises(FileNotFoundError, match="not a local folder"):
        DenseIndex.build(passages[:3], DenseSettings(encoder=str(tmp_path / "no-such-model")))
    with pytest.raises(ValueError, match="unknown dense index type"):
        DenseSettings(encoder="x", index_type="ivf")

"""`awarl index …` and `awarl search …`: build an index, query it, serve it over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console

from awarl.cli_errors import fail
from awarl.data.records import DataError
from awarl.search.retriever import SearchError

index_app = typer.Typer(no_args_is_help=True)
search_app = typer.Typer(no_args_is_help=True)
console = Console(stderr=True)


@index_app.command("build")
def build(
    corpus: Path = typer.Option(..., "--corpus", help="corpus.jsonl (one {id, title, text} per line)."),
    out: Path = typer.Option(..., "--out", help="Folder to write the index to."),
    kind: str = typer.Option("bm25", "--kind", help="bm25 (default) or dense (needs the 'dense' extra)."),
    encoder: str = typer.Option(None, "--encoder", help="dense: local sentence-transformers folder."),
    index_type: str = typer.Option("flat", "--index-type", help="dense: flat (exact) or hnsw (approximate)."),
    query_prefix: str = typer.Option("query: ", "--query-prefix", help="dense: text put before every query."),
    passage_prefix: str = typer.Option("passage: ", "--passage-prefix", help="dense: text put before every passage."),
    k1: float = typer.Option(1.5, "--k1", help="bm25: term-frequency saturation."),
    b: float = typer.Option(0.75, "--b", help="bm25: length normalisation."),
    stemmer: str = typer.Option("english", "--stemmer", help="bm25: Snowball language, or 'none'."),
) -> None:
    """Index a corpus.jsonl into OUT (loads memory-mapped later)."""
    from awarl.data.records import load_corpus

    try:
        passages = load_corpus(corpus)
        t0 = time.perf_counter()
        if kind == "bm25":
            from awarl.search.bm25 import BM25Index, BM25Settings

            settings = BM25Settings(k1=k1, b=b, stemmer=None if stemmer.lower() == "none" else stemmer)
            index = BM25Index.build(passages, settings, show_progress=True)
        elif kind == "dense":
            from awarl.search.dense import DenseIndex, DenseSettings

            if not encoder:
                raise typer.BadParameter("--kind dense needs --encoder PATH (a local sentence-transformers folder)", param_hint="--encoder")
            settings = DenseSettings(encoder=encoder, index_type=index_type, query_prefix=query_prefix, passage_prefix=passage_prefix)
            index = DenseIndex.build(passages, settings, show_progress=True)
        else:
            raise typer.BadParameter(f"unknown index kind {kind!r}; choose bm25 or dense", param_hint="--kind")
        index.save(out)
    except (DataError, ValueError, ImportError, FileNotFoundError) as exc:
        fail(exc)
    typer.echo(f"{kind} index of {len(index)} passages built in {time.perf_counter() - t0:.1f}s -> {out}")


@search_app.command("query")
def query(
    text: list[str] = typer.Argument(..., help="One or more queries."),
    index: str = typer.Option(..., "--index", help="Index folder, or the URL of a retrieval server."),
    k: int = typer.Option(3, "--k", "-k", help="Passages per query."),
    allowed: str = typer.Option(None, "--allowed", help="Closed scope: comma-separated passage ids to search within."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Words kept of each passage."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (id, title, text, score) instead of result lines."),
) -> None:
    """Search an index (or a server) and print the hits as the agent would see them."""
    from awarl.search.client import open_retriever
    from awarl.search.retriever import render

    try:
        retriever = open_retriever(index)
        scope = None if allowed is None else [[pid.strip() for pid in allowed.split(",") if pid.strip()]] * len(text)
        results = retriever.search(list(text), k, allowed=scope)
    except (DataError, SearchError, ValueError, ImportError, FileNotFoundError) as exc:
        fail(exc)
    for q, hits in zip(text, results):
        if as_json:
            typer.echo(json.dumps({"query": q, "hits": [{**h.passage.to_dict(), "score": h.score} for h in hits]}, ensure_ascii=False))
        else:
            typer.echo(f"# {q}")
            typer.echo(render(hits, max_tokens) if hits else "(no passage matched)")


@search_app.command("serve")
def serve(
    index: Path = typer.Option(..., "--index", help="Index folder built by `awarl index build`."),
    host: str = typer.Option("127.0.0.1", "--host", help="Interface to listen on (0.0.0.0 for every interface)."),
    port: int = typer.Option(8000, "--port", help="TCP port."),
    default_topk: int = typer.Option(3, "--topk", help="Passages per query when a request gives no topk."),
    max_batch: int = typer.Option(256, "--max-batch", help="Most queries answered by one index call."),
    batch_wait_ms: float = typer.Option(2.0, "--batch-wait-ms", help="How long to gather concurrent requests."),
    encoder: str = typer.Option(None, "--encoder", help="dense: encoder folder, if it moved since the build."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve an index over HTTP: POST /retrieve (Search-R1 compatible), GET /health."""
    from awarl.search.index import load_index
    from awarl.search.server import ServerSettings
    from awarl.search.server import serve as run_server

    try:
        retriever = load_index(index, **({"encoder": encoder} if encoder else {}))
        settings = ServerSettings(default_topk=default_topk, max_batch=max_batch, batch_wait_ms=batch_wait_ms)
    except (DataError, ValueError, ImportError, FileNotFoundError) as exc:
        fail(exc)
    console.print(f"serving {len(retriever)} passages on http://{host}:{port} (POST /retrieve, GET /health)")
    run_server(retriever, host=host, port=port, settings=settings, log_level=log_level)

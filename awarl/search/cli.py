"""`awarl index …` and `awarl search …`: build an index, query it, serve it over HTTP."""

from __future__ import annotations

import json
import time
from pathlib import Path

import typer
from rich.console import Console

from awarl.data.records import DataError, Passage
from awarl.errors import ConfigError

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
    """Index a corpus.jsonl into OUT (loads memory-mapped later). BM25 streams the corpus (memory
    stays flat whatever its size); an index already at OUT is replaced atomically, so a server
    reading it keeps serving the old one until restarted."""
    from awarl.data.records import iter_jsonl, load_corpus
    from awarl.search.folder import check_target

    if kind not in ("bm25", "dense"):
        raise typer.BadParameter(f"unknown index kind {kind!r}; choose bm25 or dense", param_hint="--kind")
    if kind == "dense" and not encoder:
        raise typer.BadParameter("--kind dense needs --encoder PATH (a local sentence-transformers folder)", param_hint="--encoder")
    check_target(out)
    if not corpus.is_file():
        raise DataError(corpus, "-", "file not found" if not corpus.exists() else "is a folder, not a corpus.jsonl file")
    t0 = time.perf_counter()
    if kind == "bm25":
        from awarl.search.bm25 import BM25Index, BM25Settings

        settings = BM25Settings(k1=k1, b=b, stemmer=None if stemmer.lower() == "none" else stemmer)
        passages = (Passage.from_dict(row, path=corpus, where=f"line {n}") for n, row in iter_jsonl(corpus))
        done = [0]

        def progress(n: int) -> None:
            done[0] += n
            console.print(f"  indexed {done[0]:,} passages ({time.perf_counter() - t0:.0f}s)", highlight=False)

        count = BM25Index.build_folder(passages, out, settings, on_chunk=progress, source=corpus)
    else:
        from awarl.search.dense import DenseIndex, DenseSettings

        dense = DenseSettings(encoder=encoder, index_type=index_type, query_prefix=query_prefix, passage_prefix=passage_prefix)
        index = DenseIndex.build(load_corpus(corpus), dense, show_progress=True, source=corpus)
        index.save(out)
        count = len(index)
    typer.echo(f"{kind} index of {count} passages built in {time.perf_counter() - t0:.1f}s -> {out}")


@search_app.command("query")
def query(
    text: list[str] = typer.Argument(..., help="One or more queries."),
    index: str = typer.Option(..., "--index", help="Index folder, a corpus.jsonl (BM25 built in memory), or a server URL."),
    k: int = typer.Option(3, "--k", "-k", help="Passages per query."),
    allowed: str = typer.Option(None, "--allowed", help="Closed scope: comma-separated passage ids to search within."),
    max_tokens: int = typer.Option(None, "--max-tokens", help="Words kept of each passage."),
    as_json: bool = typer.Option(False, "--json", help="Print JSON (id, title, text, score) instead of result lines."),
) -> None:
    """Search an index (or a server) and print the hits as the agent would see them."""
    from awarl.search.client import open_retriever
    from awarl.search.retriever import render

    retriever = open_retriever(index)
    scope = None if allowed is None else [[pid.strip() for pid in allowed.split(",") if pid.strip()]] * len(text)
    results = retriever.search(list(text), k, allowed=scope)
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
    port: int = typer.Option(8000, "--port", help="TCP port (1-65535)."),
    workers: int = typer.Option(1, "--workers", help="Server processes sharing one memory-mapped index (one per core)."),
    default_topk: int = typer.Option(3, "--topk", help="Passages per query when a request gives no topk."),
    max_batch: int = typer.Option(64, "--max-batch", help="Most queries answered by one index call."),
    batch_wait_ms: float = typer.Option(2.0, "--batch-wait-ms", help="How long to gather concurrent requests."),
    max_query_chars: int = typer.Option(2000, "--max-query-chars", help="Longest query accepted (longer: HTTP 422)."),
    max_body_bytes: int = typer.Option(4 * 1024 * 1024, "--max-body-bytes", help="Largest request body (larger: HTTP 413)."),
    encoder: str = typer.Option(None, "--encoder", help="dense: encoder folder, if it moved since the build."),
    log_level: str = typer.Option("info", "--log-level", help="uvicorn log level."),
) -> None:
    """Serve an index over HTTP: POST /retrieve (Search-R1 compatible), GET /health."""
    from awarl.search.index import load_index
    from awarl.search.server import ServerSettings, bind
    from awarl.search.server import serve as run_server

    if not 1 <= port <= 65535:
        raise ConfigError(f"--port {port} is out of range: use 1-65535")
    if workers < 1:
        raise ConfigError(f"--workers must be at least 1, got {workers}")
    settings = ServerSettings(default_topk=default_topk, max_batch=max_batch, batch_wait_ms=batch_wait_ms,
                              max_query_chars=max_query_chars, max_body_bytes=max_body_bytes)
    bind(host, port).close()  # a port in use is a clear error now, not after loading the index
    retriever = load_index(index, **({"encoder": encoder} if encoder else {}))
    console.print(f"serving {len(retriever)} passages on http://{host}:{port} with {workers} worker(s) "
                  "(POST /retrieve, GET /health)", highlight=False)
    run_server(retriever, host=host, port=port, settings=settings, log_level=log_level, workers=workers)

"""Retrieval: BM25 (bm25s, default) and dense (faiss, extra ``dense``) indexes, the HTTP server
(extra ``serve``) and its client, all behind one `awarl.search.retriever.Retriever` protocol.
See docs/search.md."""

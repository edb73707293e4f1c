"""HttpRetriever against real servers on 127.0.0.1: same answers as in-process, retries with
backoff, timeouts, and a clear error when the server is gone."""

from __future__ import annotations

import socket
import threading
import time

import pytest

pytest.importorskip("fastapi", reason="the server needs the 'serve' extra")
pytest.importorskip("uvicorn", reason="the server needs the 'serve' extra")

from awarl.search.client import HttpRetriever, HttpSettings, SearchUnavailable, _hit, open_retriever  # noqa: E402
from awarl.search.index import load_index  # noqa: E402
from awarl.search.retriever import Retriever, SearchError, UnknownPassageError  # noqa: E402
from awarl.search.server import background_server  # noqa: E402

FAST_RETRY = HttpSettings(timeout_s=5, retries=3, backoff_s=0.05, max_backoff_s=0.2)


class SlowRetriever:
    """A real index whose searches take ``delay`` seconds (a loaded server)."""

    def __init__(self, index, delay: float):
        self.index, self.delay = index, delay

    def search(self, queries, k, allowed=None):
        time.sleep(self.delay)
        return self.index.search(queries, k, allowed)

    def get_passage(self, pid):
        return self.index.get_passage(pid)

    def __len__(self):
        return len(self.index)


class FlakyRetriever(SlowRetriever):
    """Fails its first ``failures`` searches with an internal error, then works."""

    def __init__(self, index, failures: int):
        super().__init__(index, 0.0)
        self.failures = failures

    def search(self, queries, k, allowed=None):
        if self.failures > 0:
            self.failures -= 1
            raise RuntimeError("index shard not ready")
        return super().search(queries, k, allowed)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_http_answers_equal_in_process(hotpot_prepared, hotpot_index):
    records, passages = hotpot_prepared
    questions = [r.question for r in records[:8]]
    with background_server(hotpot_index) as url, HttpRetriever(url, FAST_RETRY) as remote:
        assert isinstance(remote, Retriever) and len(remote) == len(hotpot_index)
        for allowed in (None, [r.passages for r in records[:8]]):
            local = hotpot_index.search(questions, 4, allowed)
            got = remote.search(questions, 4, allowed)
            assert [[h.passage for h in row] for row in got] == [[h.passage for h in row] for row in local]
            assert [h.score for row in got for h in row] == pytest.approx([h.score for row in local for h in row])
        assert remote.get_passage(passages[7].id) == passages[7]
        with pytest.raises(UnknownPassageError, match="nope"):
            remote.get_passage("nope")
        # sequential calls reuse one pooled keep-alive connection
        for _ in range(5):
            remote.search(["film"], 1)
        assert len(remote._http._transport._pool.connections) == 1


def test_rejected_requests_are_not_retried(hotpot_index):
    slow_backoff = HttpSettings(retries=5, backoff_s=2.0)
    with background_server(hotpot_index) as url, HttpRetriever(url, slow_backoff) as remote:
        t0 = time.monotonic()
        with pytest.raises(SearchError, match=r"HTTP 422.*unknown passage id 'nope'"):
            remote.search(["film"], 3, allowed=[["nope"]])
        assert time.monotonic() - t0 < 1.5  # no backoff sleep happened
        with pytest.raises(SearchError, match="positive integer"):
            remote.search(["film"], 0)  # checked before any request


def test_server_errors_are_retried_until_it_recovers(hotpot_index):
    flaky = FlakyRetriever(hotpot_index, failures=2)
    with background_server(flaky) as url, HttpRetriever(url, FAST_RETRY) as remote:
        [hits] = remote.search(["Jerry Goldsmith"], 2)
    assert flaky.failures == 0 and len(hits) == 2


def test_timeout_then_clear_error(hotpot_index):
    with background_server(SlowRetriever(hotpot_index, delay=1.0)) as url:
        remote = HttpRetriever(url, HttpSettings(timeout_s=0.2, retries=1, backoff_s=0.05))
        with pytest.raises(SearchUnavailable, match="ReadTimeout"):
            remote.search(["film"], 1)
        remote.close()


def test_stopped_server_is_a_clear_error_and_a_restart_is_picked_up(hotpot_index):
    port = _free_port()
    with background_server(hotpot_index, port=port) as url:
        remote = HttpRetriever(url, FAST_RETRY)
        assert remote.search(["film"], 1)[0]
    # server stopped: retries run out quickly and the error names the URL and the cause
    t0 = time.monotonic()
    with pytest.raises(SearchUnavailable, match=rf"127\.0\.0\.1:{port}.*ConnectError"):
        remote.search(["film"], 1)
    assert time.monotonic() - t0 < 3
    # a server that comes back while the client is backing off is found again
    patient = HttpRetriever(url, HttpSettings(retries=8, backoff_s=0.1, max_backoff_s=0.4))
    stop = threading.Event()

    def restart_later() -> None:
        time.sleep(0.3)
        with background_server(hotpot_index, port=port):
            stop.wait(10)

    thread = threading.Thread(target=restart_later)
    thread.start()
    try:
        assert patient.search(["Jerry Goldsmith"], 1)[0][0].passage.title
    finally:
        stop.set()
        thread.join()
        patient.close()
        remote.close()


def test_plain_search_r1_documents_are_parsed():
    hit = _hit({"document": {"id": "42", "contents": '"Alien (film)"\nAlien is a 1979 film.\nSecond line.'}, "score": 3.5})
    assert (hit.passage.id, hit.passage.title, hit.passage.text, hit.score) == ("42", "Alien (film)", "Alien is a 1979 film.\nSecond line.", 3.5)


def test_open_retriever_picks_by_spec(hotpot_index_dir):
    assert type(open_retriever(str(hotpot_index_dir))) is type(load_index(hotpot_index_dir))
    remote = open_retriever("http://127.0.0.1:9")
    assert isinstance(remote, HttpRetriever)
    remote.close()

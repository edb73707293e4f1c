"""The retrieval server, in-process (TestClient) and over a real uvicorn on 127.0.0.1."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest

pytest.importorskip("fastapi", reason="the server needs the 'serve' extra")
pytest.importorskip("uvicorn", reason="the server needs the 'serve' extra")

from fastapi.testclient import TestClient  # noqa: E402

from awarl.search.server import ServerSettings, background_server, create_app  # noqa: E402


@pytest.fixture()
def client(hotpot_index):
    with TestClient(create_app(hotpot_index, ServerSettings(max_topk=20, max_queries=8))) as c:
        yield c


def test_health(client, hotpot_index):
    body = client.get("/health").json()
    assert body["status"] == "ok" and body["kind"] == "bm25" and body["passages"] == len(hotpot_index)


def test_retrieve_has_search_r1_shape(client, hotpot_prepared, hotpot_index):
    records, _ = hotpot_prepared
    questions = [r.question for r in records[:3]]
    resp = client.post("/retrieve", json={"queries": questions, "topk": 3, "return_scores": True})
    assert resp.status_code == 200
    result = resp.json()["result"]
    expected = hotpot_index.search(questions, 3)
    assert len(result) == 3
    for row, hits in zip(result, expected):
        assert [item["document"]["id"] for item in row] == [h.passage.id for h in hits]
        assert [item["score"] for item in row] == pytest.approx([h.score for h in hits])
        for item, h in zip(row, hits):
            # Search-R1 clients split contents on the first newline: '"title"' then the text
            head, _, text = item["document"]["contents"].partition("\n")
            assert head == f'"{h.passage.title}"' and text == h.passage.text


def test_retrieve_without_scores_lists_documents(client):
    resp = client.post("/retrieve", json={"queries": ["Jerry Goldsmith"], "topk": 2})
    [row] = resp.json()["result"]
    assert len(row) == 2 and set(row[0]) >= {"id", "contents"} and "score" not in row[0]


def test_default_topk_and_closed_scope(client, hotpot_prepared):
    records, _ = hotpot_prepared
    r = records[0]
    [row] = client.post("/retrieve", json={"queries": [r.question]}).json()["result"]
    assert len(row) == ServerSettings().default_topk
    body = {"queries": [r.question], "topk": 10, "return_scores": True, "allowed": [r.passages]}
    [row] = client.post("/retrieve", json=body).json()["result"]
    assert row and {item["document"]["id"] for item in row} <= set(r.passages)


def test_passage_endpoint(client, hotpot_prepared):
    _, passages = hotpot_prepared
    assert client.get(f"/passages/{passages[0].id}").json() == passages[0].to_dict()
    resp = client.get("/passages/nope")
    assert resp.status_code == 404 and "nope" in resp.json()["error"]


@pytest.mark.parametrize("body,status,needle", [
    ({"queries": "not a list"}, 422, "queries"),
    ({"queries": ["q"], "topk": 0}, 422, "topk"),
    ({"queries": ["q"], "topk": 21}, 422, "topk"),
    ({"queries": ["q"], "tpk": 3}, 422, "tpk"),
    ({"topk": 3}, 422, "queries"),
    ({"queries": ["q"] * 9}, 413, "limit is 8"),
    ({"queries": ["q"], "allowed": [["nope"]]}, 422, "unknown passage id 'nope'"),
    ({"queries": ["q", "r"], "allowed": [[]]}, 422, "1 lists for 2 queries"),
])
def test_bad_requests_get_4xx_json(client, body, status, needle):
    resp = client.post("/retrieve", json=body)
    assert resp.status_code == status
    assert needle in str(resp.json())


def test_broken_json_is_a_422(client):
    resp = client.post("/retrieve", content=b'{"queries": [', headers={"content-type": "application/json"})
    assert resp.status_code == 422 and resp.json()["error"] == "invalid request body"


def test_real_server_batches_concurrent_requests_without_errors(hotpot_prepared, hotpot_index):
    """64 concurrent clients x 4 requests on loopback: every answer equals in-process search,
    no request fails, and the batcher answered them with fewer index calls than requests."""
    records, _ = hotpot_prepared
    questions = [r.question for r in records]
    expected = {q: [h.passage.id for h in hits] for q, hits in zip(questions, hotpot_index.search(questions, 3))}
    with background_server(hotpot_index, settings=ServerSettings(batch_wait_ms=5)) as url:
        with httpx.Client(base_url=url, timeout=30) as http:

            def ask(i: int) -> tuple[str, list[str], int]:
                q = questions[i % len(questions)]
                resp = http.post("/retrieve", json={"queries": [q], "topk": 3, "return_scores": True})
                return q, [item["document"]["id"] for item in resp.json()["result"][0]], resp.status_code

            with ThreadPoolExecutor(max_workers=64) as pool:
                answers = list(pool.map(ask, range(256)))
            batches = http.get("/health").json()["batches"]
    assert all(status == 200 for _, _, status in answers)
    assert all(ids == expected[q] for q, ids, _ in answers)
    assert batches < len(answers)


def test_index_failure_is_a_500_json_and_the_server_stays_up(hotpot_index):
    class FailsOnce:
        def __init__(self):
            self.failed = False

        def search(self, queries, k, allowed=None):
            if not self.failed:
                self.failed = True
                raise RuntimeError("shard offline")
            return hotpot_index.search(queries, k, allowed)

        def get_passage(self, pid):
            return hotpot_index.get_passage(pid)

        def __len__(self):
            return len(hotpot_index)

    with TestClient(create_app(FailsOnce()), raise_server_exceptions=False) as c:
        first = c.post("/retrieve", json={"queries": ["film"], "topk": 1})
        assert first.status_code == 500 and first.json() == {"error": "retrieval failed: RuntimeError: shard offline"}
        second = c.post("/retrieve", json={"queries": ["film"], "topk": 1})
        assert second.status_code == 200 and len(second.json()["result"][0]) == 1

"""Retrieval server hardening: body and query size caps, strict request types, fairness under a
big request, and schema-driven fuzzing (Hypothesis over the request shape): never a 500, always
the JSON error envelope."""

from __future__ import annotations

import json
import threading
import time
from urllib.parse import quote

import httpx
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

pytest.importorskip("fastapi", reason="the server needs the 'serve' extra")

from fastapi.testclient import TestClient  # noqa: E402

from awarl.search.server import ServerSettings, background_server, create_app  # noqa: E402

LIMITS = ServerSettings(max_topk=20, max_queries=8, max_query_chars=200, max_body_bytes=4096, max_batch=4)


@pytest.fixture(scope="module")
def client(hotpot_index):
    with TestClient(create_app(hotpot_index, LIMITS), raise_server_exceptions=False) as c:
        yield c


@pytest.mark.parametrize("body,needle", [
    ({"queries": ["q"], "topk": "3"}, "topk"),
    ({"queries": ["q"], "topk": True}, "topk"),
    ({"queries": ["q"], "topk": 2.0}, "topk"),
    ({"queries": ["q"], "return_scores": "yes"}, "return_scores"),
    ({"queries": ["q"], "return_scores": 1}, "return_scores"),
    ({"queries": [3]}, "queries"),
    ({"queries": ["q"], "allowed": [[1]]}, "allowed"),
    ({"queries": ["x" * 201]}, "queries"),
])
def test_strict_types_and_query_length_are_422(client, body, needle):
    resp = client.post("/retrieve", json=body)
    assert resp.status_code == 422, resp.text
    assert resp.json()["error"] == "invalid request body" and needle in json.dumps(resp.json()["detail"])


def test_a_query_at_the_length_limit_is_answered(client):
    resp = client.post("/retrieve", json={"queries": ["film " * 40], "topk": 2})
    assert resp.status_code == 200 and len(resp.json()["result"]) == 1


def test_body_over_the_limit_is_413_declared_or_chunked(client):
    big = json.dumps({"queries": ["film"] * 8, "pad": "x" * 5000}).encode()
    resp = client.post("/retrieve", content=big, headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "4096 bytes" in resp.json()["error"]

    def chunks():  # no Content-Length: counted while reading
        for i in range(0, len(big), 1000):
            yield big[i : i + 1000]

    resp = client.post("/retrieve", content=chunks(), headers={"content-type": "application/json"})
    assert resp.status_code == 413 and "error" in resp.json()
    # and the server is fine afterwards
    assert client.post("/retrieve", json={"queries": ["film"], "topk": 1}).status_code == 200


def test_requests_beyond_max_batch_are_answered_in_slices(client, hotpot_index):
    questions = ["Jerry Goldsmith", "Alien film", "composer", "Ronald Shusett", "science fiction", "score", "director"]
    resp = client.post("/retrieve", json={"queries": questions, "topk": 2, "return_scores": True})
    want = hotpot_index.search(questions, 2)
    got = resp.json()["result"]
    assert [[d["document"]["id"] for d in row] for row in got] == [[h.passage.id for h in row] for row in want]


def test_one_big_request_does_not_starve_small_ones(hotpot_index):
    """A slow index (50 ms a call) and a 64-query request answered 4 at a time (16 calls): a
    single query sent meanwhile is answered between its slices, long before it finishes."""

    class Slow:
        def search(self, queries, k, allowed=None):
            time.sleep(0.05)
            return hotpot_index.search(queries, k, allowed)

        def get_passage(self, pid):
            return hotpot_index.get_passage(pid)

        def __len__(self):
            return len(hotpot_index)

    limits = ServerSettings(max_queries=64, max_batch=4, batch_wait_ms=0)
    with background_server(Slow(), settings=limits) as url, httpx.Client(base_url=url, timeout=30) as http:
        done = {}

        def big() -> None:
            http.post("/retrieve", json={"queries": ["film score"] * 64, "topk": 1})
            done["big"] = time.monotonic()

        t = threading.Thread(target=big)
        t.start()
        time.sleep(0.15)  # the big request is being answered
        resp = http.post("/retrieve", json={"queries": ["Alien"], "topk": 1})
        done["small"] = time.monotonic()
        t.join()
    assert resp.status_code == 200
    assert done["small"] < done["big"] - 0.2  # answered well before the big one finished


# --- fuzzing: any JSON body, and valid bodies with one field mutated --------------------------

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=30),
    lambda inner: st.lists(inner, max_size=5) | st.dictionaries(st.text(max_size=10), inner, max_size=5),
    max_leaves=20,
)
fields = st.sampled_from(["queries", "topk", "return_scores", "allowed", "extra"])


def _valid() -> st.SearchStrategy[dict]:
    return st.fixed_dictionaries({"queries": st.lists(st.text(max_size=50), min_size=1, max_size=3)},
                                 optional={"topk": st.integers(1, 20), "return_scores": st.booleans()})


def _check(resp: httpx.Response) -> None:
    assert resp.status_code in (200, 404, 405, 413, 422), (resp.status_code, resp.text)
    body = resp.json()
    assert ("result" in body) if resp.status_code == 200 else isinstance(body.get("error"), str)
    assert "Traceback" not in resp.text


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=json_values)
def test_fuzz_any_json_body(client, body):
    _check(client.post("/retrieve", json=body))


@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(body=_valid(), field=fields, value=json_values)
def test_fuzz_valid_body_with_one_field_changed(client, body, field, value):
    _check(client.post("/retrieve", json={**body, field: value}))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(raw=st.binary(max_size=300), pid=st.text(max_size=40))
def test_fuzz_raw_bytes_and_passage_ids(client, raw, pid):
    _check(client.post("/retrieve", content=raw, headers={"content-type": "application/json"}))
    if pid.strip("."):  # "." and ".." would be normalised away as path segments
        _check(client.get("/passages/" + quote(pid, safe="")))


@pytest.mark.parametrize("raw", [b'{"queries": ["a"], "topk": Infinity}', b'{"queries": ["a"], "topk": NaN}',
                                 b'{"queries": ["a"]', b"\xff\xfe", b'[["a"]]', b'"a"', b"null"])
def test_malformed_json_is_a_422(client, raw):
    resp = client.post("/retrieve", content=raw, headers={"content-type": "application/json"})
    assert resp.status_code == 422 and resp.json()["error"] == "invalid request body"


def test_openapi_lists_the_strict_request_schema(client):
    schema = client.get("/openapi.json").json()
    props = schema["components"]["schemas"]["RetrieveRequest"]["properties"]
    assert props["queries"]["items"]["maxLength"] == 200
    assert schema["components"]["schemas"]["RetrieveRequest"]["additionalProperties"] is False

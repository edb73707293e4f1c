"""Property-based fuzzing of the policy loader: random bytes, and valid YAML / Bedrock JSON
policies mutated as text and as structure, give either a loaded policy or a `PolicyError` that
names the file, never a traceback of another kind."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import yaml
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from awarl.verify.policy import Policy, PolicyError, load_policy, policy_from_dict

POLICIES = Path(__file__).resolve().parents[2] / "configs" / "policies"
PRICING_TEXT = (POLICIES / "pricing.yaml").read_text(encoding="utf-8")
PRICING = yaml.safe_load(PRICING_TEXT)
BEDROCK_TEXT = json.dumps({"policyDefinition": policy_from_dict(PRICING).to_definition()}, indent=1)

FUZZ = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def _load_file(tmp_path: Path, data: bytes) -> Policy | None:
    path = tmp_path / "policy.yaml"
    path.write_bytes(data)
    try:
        return load_policy(path)
    except PolicyError as exc:
        assert exc.source == str(path) and str(exc).startswith(str(path)) and exc.problem
        return None


@FUZZ
@given(st.binary(max_size=400))
def test_random_bytes_load_or_fail_with_a_policy_error(tmp_path, data):
    _load_file(tmp_path, data)


# -- text mutations ----------------------------------------------------------------------------
_SNIPPETS = st.sampled_from(["(", ")", "{", "}", "[", "]", ":", "- ", "\n", "  ", '"', "'", "\\", "&a", "*a", "!!int", "\t",
                             "\xff", "é", "0", "1.5", "-", "null", "true", "=>", "(= tier 1)", "patterns: 3", "type: Tier",
                             "regex: '(a+)+'", "scale: x", "value: [1]", "{value: .inf}", "%", "#", "|", ">"])


@st.composite
def mutated(draw, text: str) -> str:
    out = text
    for _ in range(draw(st.integers(1, 4))):
        start = draw(st.integers(0, len(out)))
        end = draw(st.integers(start, min(len(out), start + 40)))
        op = draw(st.sampled_from(["delete", "insert", "replace", "duplicate"]))
        if op == "delete":
            out = out[:start] + out[end:]
        elif op == "insert":
            out = out[:start] + draw(_SNIPPETS) + out[start:]
        elif op == "replace":
            out = out[:start] + draw(_SNIPPETS) + out[end:]
        else:
            out = out[:end] + out[start:end] + out[end:]
    return out


@FUZZ
@given(mutated(PRICING_TEXT))
def test_mutated_yaml_policies_load_or_fail_with_a_policy_error(tmp_path, text):
    _load_file(tmp_path, text.encode("utf-8", "surrogatepass"))


@FUZZ
@given(mutated(BEDROCK_TEXT))
def test_mutated_bedrock_json_policies_load_or_fail_with_a_policy_error(tmp_path, text):
    _load_file(tmp_path, text.encode("utf-8", "surrogatepass"))


# -- structural mutations ----------------------------------------------------------------------
_SCALARS = st.one_of(
    st.none(), st.booleans(), st.integers(-(10**20), 10**20), st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=12), st.sampled_from(["bool", "int", "real", "Tier", "gold", "(=> x y)", "(a+)+$", "", "rules"]),
)
_VALUES = st.recursive(_SCALARS, lambda kids: st.one_of(st.lists(kids, max_size=3), st.dictionaries(st.text(max_size=8), kids, max_size=3)), max_leaves=6)


def _paths(node: Any, prefix: tuple = ()) -> list[tuple]:
    out = [prefix]
    if isinstance(node, dict):
        for k, v in node.items():
            out += _paths(v, (*prefix, k))
    elif isinstance(node, list):
        for i, v in enumerate(node):
            out += _paths(v, (*prefix, i))
    return out


_PRICING_PATHS = _paths(PRICING)


@FUZZ
@given(st.lists(st.tuples(st.sampled_from(_PRICING_PATHS), _VALUES, st.booleans()), min_size=1, max_size=3))
def test_structurally_mutated_policies_load_or_fail_with_a_policy_error(edits):
    data = copy.deepcopy(PRICING)
    for path, value, delete in edits:
        assume(path)
        parent = data
        try:
            for key in path[:-1]:
                parent = parent[key]
            if delete:
                del parent[path[-1]]
            else:
                parent[path[-1]] = value
        except (KeyError, IndexError, TypeError):
            continue  # an earlier edit removed this path
    try:
        policy = policy_from_dict(data, source="mutated.yaml")
    except PolicyError as exc:
        assert exc.source == "mutated.yaml" and exc.problem
        return
    assert isinstance(policy, Policy) and set(policy.compiled) == {r.id for r in policy.rules}

import json

import pytest

from awarl.data.adapters import load_dataset_file
from awarl.data.records import DataError, QARecord, load_corpus, load_records, passage_id


def test_hotpotqa_sample(sample_files):
    records, passages = load_dataset_file("hotpotqa", sample_files["hotpotqa"])
    assert len(records) == 40
    first = records[0]
    assert first.id == "5a85fb085542994775f606de"
    assert first.answers == ["Ronald Shusett"] and first.answerable
    by_id = {p.id: p for p in passages}
    # supporting facts name "Alien (soundtrack)" and "Alien (film)"
    assert [by_id[s].title for s in first.supporting] == ["Alien (soundtrack)", "Alien (film)"]
    assert set(first.supporting) <= set(first.passages)
    assert len(first.passages) == 10
    assert sum(r.meta["type"] == "comparison" for r in records) == 12
    # passages are deduplicated by content with stable ids
    assert len(by_id) == len(passages)
    p = passages[0]
    assert p.id == passage_id(p.title, p.text)


def test_2wiki_sample(sample_files):
    records, passages = load_dataset_file("2wiki", sample_files["2wiki"])
    assert len(records) == 40
    assert records[0].answers == ["18 January 1866"]
    titles = {p.id: p.title for p in passages}
    assert [titles[s] for s in records[0].supporting] == ["Karl, Prince of Leiningen", "Emich, 5th Prince of Leiningen"]


def test_musique_aliases_and_support(sample_files):
    records, passages = load_dataset_file("musique", sample_files["musique"])
    assert len(records) == 40
    assert records[0].answers == ["conga", "Conga"]
    raw = [json.loads(line) for line in sample_files["musique"].read_text().splitlines()]
    for rec, row in zip(records, raw):
        assert len(rec.supporting) == sum(p["is_supporting"] for p in row["paragraphs"])
        assert rec.answers[0] == row["answer"] and set(row["answer_aliases"]) <= set(rec.answers)


def test_musique_full_answerable_flags(sample_files):
    records, _ = load_dataset_file("musique", sample_files["musique_full"])
    assert len(records) == 10
    assert sum(not r.answerable for r in records) == 5
    for r in records:
        assert r.meta["official_id"] == r.id.removesuffix("#unanswerable")
        assert r.id.endswith("#unanswerable") == (not r.answerable)


def test_musique_full_duplicate_ids(tmp_path):
    row = {"id": "2hop__1", "question": "q?", "answer": "a", "answer_aliases": [], "answerable": True,
           "paragraphs": [{"idx": 0, "title": "T", "paragraph_text": "a text", "is_supporting": True}]}
    path = tmp_path / "full.jsonl"
    path.write_text(json.dumps(row) + "\n" + json.dumps({**row, "answerable": False}) + "\n")
    records, passages = load_dataset_file("musique", path)
    assert [r.id for r in records] == ["2hop__1", "2hop__1#unanswerable"]
    assert len(passages) == 1
    path.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(DataError, match="line 2.*appears twice"):
        load_dataset_file("musique", path)


def test_flashrag(tmp_path):
    path = tmp_path / "f.jsonl"
    path.write_text('{"id": "test_0", "question": "who?", "golden_answers": ["A", "B"]}\n')
    records, passages = load_dataset_file("flashrag", path)
    assert records[0].answers == ["A", "B"] and passages == []


@pytest.mark.parametrize(
    "content,match",
    [
        ('{"id": "1", "question": "q"}\n', r"line 1, field 'golden_answers': missing"),
        ('{"id": "1", "question": "q", "golden_answers": ["a"]}\n{broken\n', r"line 2: broken JSON"),
        ('{"id": "1", "question": 3, "golden_answers": ["a"]}\n', r"field 'question': expected a string, got a number"),
    ],
)
def test_flashrag_bad_input(tmp_path, content, match):
    path = tmp_path / "bad.jsonl"
    path.write_text(content)
    with pytest.raises(DataError, match=match) as info:
        load_dataset_file("flashrag", path)
    assert str(path) in str(info.value)


def test_hotpot_bad_input_names_index(tmp_path):
    rows = [{"_id": "a", "question": "q", "answer": "x", "context": [["T", ["s"]]], "supporting_facts": [["T", 0]]},
            {"_id": "b", "question": "q", "context": [], "supporting_facts": []}]
    path = tmp_path / "h.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"index 1\), field 'answer': missing"):
        load_dataset_file("hotpotqa", path)
    rows[1] = {**rows[0], "_id": "b", "supporting_facts": [["Nope", 0]]}
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match="'Nope' is not in the context"):
        load_dataset_file("hotpotqa", path)


def test_records_and_corpus_round_trip(tmp_path, sample_files):
    from awarl.data.records import write_jsonl

    records, passages = load_dataset_file("musique", sample_files["musique_full"])
    write_jsonl(tmp_path / "records.jsonl", (r.to_dict() for r in records))
    write_jsonl(tmp_path / "corpus.jsonl", (p.to_dict() for p in passages))
    assert load_records(tmp_path / "records.jsonl") == records
    assert load_corpus(tmp_path / "corpus.jsonl") == passages
    with pytest.raises(DataError, match="field 'answers'"):
        QARecord.from_dict({"id": "x", "question": "q", "dataset": "d"}, path="r.jsonl", where="line 3")


def test_corpus_duplicate_id(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text('{"id": "d1", "title": "a", "text": "x"}\n{"id": "d1", "title": "b", "text": "y"}\n')
    with pytest.raises(DataError, match="line 2.*duplicate passage id 'd1' \\(first on line 1\\)"):
        load_corpus(path)


# -- hardening: duplicate ids, format and shape mismatches, encodings, positions ---------------------

def _hotpot_row(qid, **extra):
    return {"_id": qid, "question": "q?", "answer": "x", "context": [["T", ["s."]]], "supporting_facts": [["T", 0]],
            **extra}


@pytest.mark.parametrize("dataset", ["hotpotqa", "2wiki"])
def test_wiki_duplicate_id_names_both_positions(tmp_path, dataset):
    path = tmp_path / "dup.json"
    path.write_text(json.dumps([_hotpot_row("a"), _hotpot_row("b"), _hotpot_row("a")]))
    with pytest.raises(DataError) as info:
        load_dataset_file(dataset, path)
    assert str(info.value) == (f"{path}, example 2 (index 2), field '_id': duplicate id 'a' "
                               "(first at example 0 (index 0))")


def test_hotpot_sample_with_a_repeated_id_is_refused(tmp_path, sample_files):
    """The issue's case: a repeated `_id` made `eval score` pair predictions with the wrong records."""
    rows = json.loads(sample_files["hotpotqa"].read_text())
    rows[7]["_id"] = rows[3]["_id"]
    path = tmp_path / "hotpot.json"
    path.write_text(json.dumps(rows))
    with pytest.raises(DataError, match=r"index 7\), field '_id': duplicate id .* \(first at example 3 \(index 3\)\)"):
        load_dataset_file("hotpotqa", path)


def test_musique_and_flashrag_duplicates_name_both_lines(tmp_path):
    row = {"id": "q1", "question": "q?", "answer": "a", "paragraphs": []}
    path = tmp_path / "m.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [row, {**row, "id": "q2"}, row]) + "\n")
    with pytest.raises(DataError, match=r"line 3, field 'id': id 'q1' appears twice .*\(first on line 1\)"):
        load_dataset_file("musique", path)
    path = tmp_path / "f.jsonl"
    path.write_text('{"id": 5, "question": "q", "golden_answers": ["a"]}\n{"id": "5", "question": "q", "golden_answers": ["b"]}\n')
    with pytest.raises(DataError, match=r"line 2, field 'id': duplicate id '5' \(first on line 1\)"):
        load_dataset_file("flashrag", path)


def test_2wiki_file_read_as_hotpotqa_is_refused(sample_files):
    with pytest.raises(DataError) as info:
        load_dataset_file("hotpotqa", sample_files["2wiki"])
    message = str(info.value)
    assert "example 0 (index 0)" in message and "looks like a 2WikiMultiHopQA example" in message
    assert "'evidences'" in message and "use --dataset 2wiki" in message


def test_hotpotqa_file_read_as_2wiki_is_refused(sample_files):
    with pytest.raises(DataError, match=r"looks like a HotpotQA example \('level', type 'bridge'\), not "
                                         r"2WikiMultiHopQA: use --dataset hotpotqa"):
        load_dataset_file("2wiki", sample_files["hotpotqa"])


def test_minimal_rows_without_telling_fields_load_as_either_wiki_format(tmp_path):
    path = tmp_path / "plain.json"
    path.write_text(json.dumps([_hotpot_row("a")]))
    assert load_dataset_file("hotpotqa", path)[0][0].dataset == "hotpotqa"
    assert load_dataset_file("2wiki", path)[0][0].dataset == "2wiki"


def test_musique_file_read_as_flashrag_and_back(tmp_path, sample_files):
    with pytest.raises(DataError, match=r"line 1: this looks like a MuSiQue example .* use --dataset musique"):
        load_dataset_file("flashrag", sample_files["musique"])
    path = tmp_path / "f.jsonl"
    path.write_text('{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    with pytest.raises(DataError, match=r"looks like a FlashRAG example \('golden_answers'\), not MuSiQue"):
        load_dataset_file("musique", path)


def test_jsonl_given_as_hotpotqa_names_the_shape(sample_files):
    with pytest.raises(DataError) as info:
        load_dataset_file("hotpotqa", sample_files["musique"])
    message = str(info.value)
    assert message.startswith(f"{sample_files['musique']}: this looks like JSON lines (one object per line); "
                              "HotpotQA files are one JSON list")
    assert "use --dataset musique" in message and "Extra data" not in message


def test_json_list_given_as_musique_names_the_shape(sample_files):
    with pytest.raises(DataError) as info:
        load_dataset_file("musique", sample_files["hotpotqa"])
    message = str(info.value)
    assert message.startswith(f"{sample_files['hotpotqa']}: this looks like one JSON list; MuSiQue files are "
                              "JSON lines (one object per line)")
    assert "use --dataset hotpotqa" in message


def test_single_object_and_predictions_file_given_as_data(tmp_path):
    path = tmp_path / "one.json"
    path.write_text(json.dumps(_hotpot_row("a")))
    with pytest.raises(DataError, match="top level: expected a JSON list of examples, got one JSON object"):
        load_dataset_file("hotpotqa", path)
    path.write_text(json.dumps({"answer": {"a": "x"}, "sp": {"a": []}}))
    with pytest.raises(DataError, match="looks like a HotpotQA/2Wiki predictions file"):
        load_dataset_file("hotpotqa", path)


def test_broken_json_list_keeps_the_parser_position(tmp_path):
    path = tmp_path / "broken.json"
    path.write_text('[\n{"_id": "a",\n "question": }\n]')
    with pytest.raises(DataError, match=r"broken.json, line 3: broken JSON \(Expecting value at column 14\)"):
        load_dataset_file("hotpotqa", path)


def test_latin1_inputs_name_file_and_byte_offset(tmp_path):
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_bytes('{"id": "d1", "title": "a", "text": "x"}\n{"id": "d2", "title": "Café", "text": "y"}\n'
                       .encode("latin-1"))
    with pytest.raises(DataError) as info:
        load_corpus(corpus)
    offset = corpus.read_bytes().index(b"\xe9")
    assert str(info.value) == (f"{corpus}, line 2: not UTF-8 text: byte b'\\xe9' at byte offset {offset} "
                               "(it may be Latin-1 or Windows-1252 text; save it as UTF-8)")
    hotpot = tmp_path / "h.json"
    hotpot.write_bytes(json.dumps([_hotpot_row("a", question="Qué?")], ensure_ascii=False).encode("latin-1"))
    with pytest.raises(DataError, match=r"h.json: not UTF-8 text: byte b'\\xe9' at byte offset \d+"):
        load_dataset_file("hotpotqa", hotpot)


def test_utf16_file_is_named_as_such(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_text('{"id": "1", "question": "q", "answer": "a", "paragraphs": []}\n', encoding="utf-16")
    with pytest.raises(DataError, match=r"line 1: not UTF-8 text: byte b'\\xff' at byte offset 0 \(it looks like UTF-16"):
        load_dataset_file("musique", path)


def test_utf8_byte_order_mark_is_accepted(tmp_path):
    path = tmp_path / "m.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b'{"id": "1", "question": "q", "golden_answers": ["a"]}\n')
    assert load_dataset_file("flashrag", path)[0][0].id == "1"
    hotpot = tmp_path / "h.json"
    hotpot.write_bytes(b"\xef\xbb\xbf" + json.dumps([_hotpot_row("a")]).encode())
    assert load_dataset_file("hotpotqa", hotpot)[0][0].id == "a"


@pytest.mark.parametrize("dataset", ["hotpotqa", "2wiki", "musique", "flashrag"])
def test_folder_or_missing_file_is_a_data_error(tmp_path, dataset):
    with pytest.raises(DataError) as info:
        load_dataset_file(dataset, tmp_path)
    assert str(info.value) == f"{tmp_path}: is a folder; expected a file"
    with pytest.raises(DataError) as info:
        load_dataset_file(dataset, tmp_path / "nope.json")
    assert str(info.value) == f"{tmp_path / 'nope.json'}: file not found"  # no stray "-" position


def test_data_error_format_with_and_without_position():
    assert str(DataError("f.jsonl", "", "file not found")) == "f.jsonl: file not found"
    assert str(DataError("f.jsonl", "-", "file not found")) == "f.jsonl: file not found"
    assert str(DataError("f.jsonl", "", "missing", "id")) == "f.jsonl, field 'id': missing"
    assert str(DataError("f.jsonl", "line 3", "missing", "id")) == "f.jsonl, line 3, field 'id': missing"


def test_records_reader_refuses_duplicate_ids_and_bad_meta(tmp_path):
    rec = {"id": "r1", "question": "q", "answers": ["a"], "dataset": "d"}
    path = tmp_path / "records.jsonl"
    path.write_text("\n".join(json.dumps(r) for r in [rec, {**rec, "id": "r2"}, rec]) + "\n")
    with pytest.raises(DataError, match=r"line 3, field 'id': duplicate record id 'r1' \(first on line 1\)"):
        load_records(path)
    path.write_text(json.dumps({**rec, "meta": [1]}) + "\n")
    with pytest.raises(DataError, match=r"line 1, field 'meta': expected an object, got a list"):
        load_records(path)


def test_deeply_nested_or_huge_json_is_a_data_error(tmp_path):
    path = tmp_path / "deep.jsonl"
    path.write_text("[" * 100_000 + "]" * 100_000 + "\n")
    with pytest.raises(DataError, match="line 1"):
        load_corpus(path)
    path.write_text('{"id": ' + "9" * 5000 + "}\n")
    with pytest.raises(DataError, match="line 1: unreadable JSON value"):
        load_corpus(path)


def test_write_jsonl_failure_leaves_target_and_no_temp_file(tmp_path):
    from awarl.data.records import write_jsonl

    target = tmp_path / "records.jsonl"
    target.write_text('{"old": true}\n')

    def rows():
        yield {"id": 1}
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError):
        write_jsonl(target, rows())
    assert target.read_text() == '{"old": true}\n'
    assert sorted(p.name for p in tmp_path.iterdir()) == ["records.jsonl"]


def test_hub_load_offline_is_one_clear_error(tmp_path):
    """Tests run with HF_HUB_OFFLINE=1 (conftest) and an empty cache: no network is touched."""
    pytest.importorskip("datasets")
    from awarl.data.adapters import load_hub

    with pytest.raises(DataError) as info:
        load_hub("hotpotqa", "validation", cache_dir=str(tmp_path))
    message = str(info.value)
    assert message.startswith("hub:hotpotqa/hotpot_qa: cannot load split 'validation'")
    assert "pass --input" in message

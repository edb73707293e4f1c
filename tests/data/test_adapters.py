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
        ('{"id": "1", "question": 3, "golden_answers": ["a"]}\n', r"field 'question': expected str"),
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

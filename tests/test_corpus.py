"""Tests for the frozen demo corpus: loading, tokenizer, BM25 ranking, page lookup, snippets."""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import numpy as np
import pytest

from draligned.hashing import sha256_file
from draligned.tools.bm25 import BM25
from draligned.tools.corpus import (
    Corpus,
    CorpusDocument,
    CorpusError,
    SearchHit,
    load_corpus,
    normalize_page_text,
    snippet,
    tokenize,
)

DEMO = Path(__file__).resolve().parents[1] / "corpora" / "demo" / "corpus.jsonl"


def _ids(a: int, b: int) -> set[str]:
    return {f"d{i:03d}" for i in range(a, b + 1)}


# Which demo documents favour which endpoint (see corpora/demo/README.md).
FACTOR_DOCS: dict[str, dict[str, set[str]]] = {
    "budget_cap": {"P": _ids(1, 7), "Q": _ids(8, 13), "N": _ids(14, 17)},
    "residence": {"P": _ids(18, 23), "Q": _ids(24, 29), "N": _ids(30, 33)},
    "mobility": {"P": _ids(34, 39), "Q": _ids(40, 45), "N": _ids(46, 49)},
    "driving_pattern": {"P": _ids(50, 55), "Q": _ids(56, 61), "N": _ids(74, 77)},
    "spending": {"P": _ids(62, 67), "Q": _ids(68, 73), "N": _ids(74, 77)},
}
DISTRACTORS = _ids(78, 84)

TASKS = {
    "budget_cap": "Plan a 7-day trip to Japan in April for me and my partner: route, accommodation, "
    "transport and a day-by-day budget.",
    "residence": "请为我制定一个为期三个月的领导力提升学习计划，包括线下课程、社群活动和书单。",
    "mobility": "Make a 12-month career plan for moving from software QA into data analysis: target "
    "employers, skills to build, and job-search steps.",
    "driving_pattern": "Recommend a first-year car insurance plan for my new car: which coverages to buy, "
    "which insurer, and an estimated premium.",
}
TASKS["spending"] = TASKS["driving_pattern"]

ENDPOINTS = {
    "budget_cap": {
        "P": "Our total budget cap for the trip is 6,000 yuan for both of us, including flights.",
        "Q": "Our total budget cap for the trip is 15,000 yuan for both of us, including flights.",
    },
    "residence": {"P": "我目前住在杭州。", "Q": "我目前住在深圳。"},
    "mobility": {
        "P": "I am open to relocating to another city for the right job.",
        "Q": "I only want jobs in my current city and will not relocate.",
    },
    "driving_pattern": {
        "P": "I mainly use the car for long self-drive trips to remote areas such as Tibet and Yunnan.",
        "Q": "I mainly use the car for a short daily commute within the city.",
    },
    "spending": {
        "P": "I want the most complete coverage and do not mind paying more.",
        "Q": "I want the cheapest plan that is still adequate.",
    },
}


@pytest.fixture(scope="module")
def demo() -> Corpus:
    return load_corpus(DEMO)


def _doc(i: int, **over: object) -> dict[str, object]:
    d: dict[str, object] = {
        "id": f"t{i}",
        "url": f"https://site.example/page-{i}",
        "title": f"Title {i}",
        "text": f"Body text number {i} about hostels.",
        "lang": "en",
    }
    d.update(over)
    return d


def _write(path: Path, lines: list[str]) -> Path:
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --------------------------------------------------------------------------- loading


def test_demo_corpus_loads_with_unique_ids_urls_and_langs(demo: Corpus) -> None:
    assert len(demo) >= 60
    docs = list(demo)
    assert len({d.id for d in docs}) == len(docs)
    assert len({d.url.rstrip("/") for d in docs}) == len(docs)
    assert {d.lang for d in docs} == {"en", "zh"}
    assert demo.path == DEMO
    assert demo.sha256 == sha256_file(DEMO)
    for d in docs:
        assert re.fullmatch(r"d\d{3}", d.id), d.id
        assert re.fullmatch(r"https://[a-z0-9-]+\.example/[a-z0-9-]+", d.url), d.url


def test_demo_corpus_documents_are_short_pages_in_their_language(demo: Corpus) -> None:
    for d in demo:
        if d.lang == "en":
            n_words = len(re.findall(r"\w+", d.text))
            assert 80 <= n_words <= 220, (d.id, n_words)
        else:
            n_cjk = len(re.findall(r"[\u4e00-\u9fff]", d.text))
            assert 150 <= n_cjk <= 450, (d.id, n_cjk)


def test_demo_corpus_covers_every_factor_endpoint(demo: Corpus) -> None:
    present = {d.id for d in demo}
    for factor, groups in FACTOR_DOCS.items():
        assert len(groups["P"]) >= 6 and len(groups["Q"]) >= 6, factor
        assert len(groups["N"]) >= 3, factor
        assert groups["P"] | groups["Q"] | groups["N"] <= present, factor
    assert len(DISTRACTORS) >= 4 and DISTRACTORS <= present
    lang = {d.id: d.lang for d in demo}
    assert all(lang[i] == "zh" for g in FACTOR_DOCS["residence"].values() for i in g)
    for factor in ("budget_cap", "mobility", "driving_pattern", "spending"):
        assert all(lang[i] == "en" for g in FACTOR_DOCS[factor].values() for i in g)


@pytest.mark.parametrize(
    ("lines", "lineno", "needle"),
    [
        ([json.dumps(_doc(1)), '{"id": "t2", "url": '], 2, "invalid JSON"),
        ([json.dumps(_doc(1)), "", json.dumps({k: v for k, v in _doc(2).items() if k != "url"})], 3, "field 'url'"),
        ([json.dumps(_doc(1)), json.dumps(_doc(2, id="t1"))], 2, "field 'id'"),
        ([json.dumps(_doc(1)), json.dumps(_doc(2, url="https://site.example/page-1/"))], 2, "field 'url'"),
        ([json.dumps(_doc(1, lang="fr"))], 1, "field 'lang'"),
        ([json.dumps(_doc(1, author="x"))], 1, "field 'author'"),
        ([json.dumps(_doc(1, title=""))], 1, "field 'title'"),
        ([json.dumps(_doc(1)), "[1, 2]"], 2, "JSON object"),
    ],
    ids=["bad-json", "missing-url", "dup-id", "dup-url-slash", "bad-lang", "extra-field", "empty-title", "not-object"],
)
def test_bad_lines_name_file_line_and_field(tmp_path: Path, lines: list[str], lineno: int, needle: str) -> None:
    path = _write(tmp_path / "bad.jsonl", lines)
    with pytest.raises(CorpusError) as info:
        load_corpus(path)
    msg = str(info.value)
    assert msg.startswith(f"{path}:{lineno}:"), msg
    assert needle in msg, msg


def test_duplicate_error_points_to_first_occurrence(tmp_path: Path) -> None:
    path = _write(tmp_path / "dup.jsonl", [json.dumps(_doc(1)), json.dumps(_doc(2)), json.dumps(_doc(3, id="t2"))])
    with pytest.raises(CorpusError, match=r"duplicate id 't2' \(first on line 2\)"):
        load_corpus(path)


def test_empty_or_missing_file_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(CorpusError, match="no documents"):
        load_corpus(_write(tmp_path / "empty.jsonl", ["", "  "]))
    with pytest.raises(CorpusError, match="cannot read"):
        load_corpus(tmp_path / "absent.jsonl")


def test_small_corpus_hash_and_blank_lines(tmp_path: Path) -> None:
    path = _write(tmp_path / "ok.jsonl", [json.dumps(_doc(1)), "", json.dumps(_doc(2), ensure_ascii=False)])
    corpus = load_corpus(path)
    assert len(corpus) == 2
    assert corpus.sha256 == sha256_file(path)
    assert [d.id for d in corpus.documents] == ["t1", "t2"]
    assert corpus.get("t2") == CorpusDocument(**_doc(2))  # type: ignore[arg-type]
    assert corpus.get("nope") is None


def test_the_same_bytes_are_indexed_once_and_an_edited_file_anew(tmp_path: Path) -> None:
    first = _write(tmp_path / "a.jsonl", [json.dumps(_doc(1)), json.dumps(_doc(2))])
    corpus = load_corpus(first)
    copy = tmp_path / "b.jsonl"
    copy.write_bytes(first.read_bytes())
    again, elsewhere = load_corpus(first), load_corpus(copy)
    assert again is corpus  # nothing tokenized or indexed twice
    assert elsewhere.path == copy and corpus.path == first  # each keeps the path it was loaded from
    assert elsewhere.documents is corpus.documents and elsewhere.sha256 == corpus.sha256
    _write(first, [json.dumps(_doc(1)), json.dumps(_doc(3, text="Body text about ferries."))])
    edited = load_corpus(first)
    assert edited.sha256 == sha256_file(first) != corpus.sha256
    assert [d.id for d in edited] == ["t1", "t3"] and edited.search("ferries", 5)[0].doc_id == "t3"
    assert [d.id for d in load_corpus(copy)] == ["t1", "t2"]


def _bits(scores: np.ndarray) -> list[int]:
    return np.asarray(scores, dtype=np.float32).view(np.uint32).tolist()


def test_bm25_scores_are_those_of_bm25s_bit_for_bit(demo: Corpus) -> None:
    """The corpus's own BM25 (numpy only) gives exactly the float32 scores of bm25s, which built the index
    before: on the demo corpus (every term alone, and random queries with repeated terms) and on random
    corpora with empty documents and repeated terms."""
    import bm25s

    rng = random.Random(7)

    def same(docs: list[list[int]], n_terms: int, queries: list[list[int]]) -> None:
        ref = bm25s.BM25(backend="numpy")
        ref.index((docs, {f"t{i}": i for i in range(n_terms)}), show_progress=False)
        ours = BM25(docs, n_terms)
        for q in queries:
            assert _bits(ours.scores(q)) == _bits(ref.get_scores_from_ids(q)), q

    terms = [[demo._vocab[t] for t in tokenize(d.title) + tokenize(d.text)] for d in demo]
    n = len(demo._vocab)
    same(terms, n, [[t] for t in range(n)] + [[rng.randrange(n) for _ in range(rng.randint(1, 8))]
                                              for _ in range(300)])
    for _ in range(40):
        v = rng.randint(1, 40)
        docs = [[rng.randrange(v) for _ in range(rng.randint(0, 30))] for _ in range(rng.randint(1, 25))]
        docs[0].append(0)  # at least one term in the corpus
        same(docs, v, [[rng.randrange(v) for _ in range(rng.randint(1, 5))] for _ in range(20)])


# --------------------------------------------------------------------------- tokenizer


def test_tokenize_cjk_bigrams_and_single_characters() -> None:
    assert tokenize("杭州技术沙龙") == ["杭州", "州技", "技术", "术沙", "沙龙"]
    # punctuation splits runs; a one-character run yields that character
    assert tokenize("书单，和。杭州") == ["书单", "和", "杭州"]
    assert tokenize("AI领导力") == ["ai", "领导", "导力"]


def test_tokenize_numbers_stopwords_and_case() -> None:
    assert tokenize("6,000 yuan") == ["6000", "yuan"]
    assert tokenize("6,000") == tokenize("6000") == tokenize("６，０００")
    assert tokenize("15,000,000 and 1,2,3") == ["15000000", "1", "2", "3"]
    assert tokenize("The Budget of THE trip is for us") == ["budget", "trip"]
    assert tokenize("day-by-day snake_case") == ["day", "day", "snake", "case"]
    assert tokenize("") == [] and tokenize("the and of , .") == []


# --------------------------------------------------------------------------- search


def test_chinese_search_finds_city_documents(demo: Corpus) -> None:
    hz = demo.search("杭州 领导力 沙龙", 5)
    sz = demo.search("深圳 领导力 沙龙", 5)
    assert hz[0].doc_id in FACTOR_DOCS["residence"]["P"]
    assert "杭州" in hz[0].text
    assert sz[0].doc_id in FACTOR_DOCS["residence"]["Q"]
    assert "深圳" in sz[0].text


@pytest.mark.parametrize("endpoint", ["P", "Q"])
@pytest.mark.parametrize("factor", list(FACTOR_DOCS))
def test_task_plus_endpoint_query_ranks_that_endpoint_first(demo: Corpus, factor: str, endpoint: str) -> None:
    other = "Q" if endpoint == "P" else "P"
    groups = FACTOR_DOCS[factor]
    query = f"{TASKS[factor]} {ENDPOINTS[factor][endpoint]}"
    hits = demo.search(query, len(demo))
    ranked = [h.doc_id for h in hits if h.doc_id in groups["P"] | groups["Q"]]
    assert ranked[0] in groups[endpoint], (query, ranked[:5])
    top3 = ranked[:3]
    assert sum(i in groups[endpoint] for i in top3) >= 2, (query, top3)
    assert sum(i in groups[other] for i in top3) <= 1


def test_short_english_endpoint_queries_are_clean(demo: Corpus) -> None:
    cases = [
        ("capsule hotels overnight buses convenience stores 6,000 yuan", FACTOR_DOCS["budget_cap"]["P"]),
        ("ryokan kaiseki Green Car 15,000 yuan", FACTOR_DOCS["budget_cap"]["Q"]),
        ("data analyst jobs relocating another city relocation package", FACTOR_DOCS["mobility"]["P"]),
        ("Chengdu data analyst local employers meetups", FACTOR_DOCS["mobility"]["Q"]),
        ("Tibet Yunnan self-drive remote roadside assistance towing", FACTOR_DOCS["driving_pattern"]["P"]),
        ("city commute low mileage discount", FACTOR_DOCS["driving_pattern"]["Q"]),
        ("most complete coverage paying more", FACTOR_DOCS["spending"]["P"]),
        ("cheapest adequate car insurance plan", FACTOR_DOCS["spending"]["Q"]),
    ]
    for query, wanted in cases:
        top = [h.doc_id for h in demo.search(query, 3)]
        assert all(i in wanted for i in top), (query, top)


def test_search_hits_are_complete_positive_and_sorted(demo: Corpus) -> None:
    hits = demo.search("Kyoto boutique hotels", 10)
    assert 0 < len(hits) <= 10
    assert all(isinstance(h, SearchHit) and h.score > 0 for h in hits)
    assert [h.score for h in hits] == sorted((h.score for h in hits), reverse=True)
    doc = demo.get(hits[0].doc_id)
    assert doc is not None
    assert (hits[0].title, hits[0].url, hits[0].text) == (doc.title, doc.url, doc.text)


def test_search_returns_fewer_than_k_and_empty_for_unsearchable(demo: Corpus) -> None:
    assert len(demo.search("omakase", 50)) < 50  # only docs that contain the term
    assert demo.search("", 5) == []
    assert demo.search("the and of !!", 5) == []
    assert demo.search("zzqxnonexistentterm", 5) == []
    assert demo.search("Kyoto", 0) == []


def test_search_is_deterministic(demo: Corpus) -> None:
    query = f"{TASKS['mobility']} {ENDPOINTS['mobility']['Q']}"
    first = demo.search(query, 10)
    assert first == demo.search(query, 10)
    assert first == load_corpus(DEMO).search(query, 10)


def test_ties_are_broken_by_document_position(tmp_path: Path) -> None:
    same = {"title": "Hostel guide", "text": "Cheap hostel beds in Osaka."}
    lines = [json.dumps(_doc(i, **same)) for i in (3, 1, 2)] + [json.dumps(_doc(9))]
    corpus = load_corpus(_write(tmp_path / "ties.jsonl", lines))
    hits = corpus.search("hostel Osaka", 10)
    assert [h.doc_id for h in hits] == ["t3", "t1", "t2"]
    assert len({h.score for h in hits}) == 1


# --------------------------------------------------------------------------- pages and snippets


def test_page_lookup_by_url(demo: Corpus) -> None:
    doc = demo.get("d019")
    assert doc is not None
    assert demo.page(doc.url) == doc
    assert demo.page(doc.url + "/") == doc
    assert demo.page("https://nowhere.example/missing") is None
    assert demo.page(doc.url + "x") is None


def test_page_lookup_tolerates_stored_trailing_slash(tmp_path: Path) -> None:
    corpus = load_corpus(_write(tmp_path / "s.jsonl", [json.dumps(_doc(1, url="https://a.example/p/"))]))
    assert corpus.page("https://a.example/p") is not None
    assert corpus.page("https://a.example/p/") is not None


def test_normalize_page_text_keeps_paragraphs_and_collapses_whitespace() -> None:
    doc = CorpusDocument(
        id="x",
        url="https://a.example/x",
        title="  A   title ",
        text="First  line\nsame para.\n\n\n  Second\t\tpara.  \n \n\nThird.",
        lang="en",
    )
    assert normalize_page_text(doc) == "A title\n\nFirst line same para.\n\nSecond para.\n\nThird."


def test_normalize_page_text_on_demo_page(demo: Corpus) -> None:
    doc = demo.get("d018")
    assert doc is not None
    out = normalize_page_text(doc)
    assert out.startswith(doc.title + "\n\n")
    assert "\n\n\n" not in out and "  " not in out


def test_snippet_cuts_on_characters_after_collapsing() -> None:
    assert snippet("a  b\n\nc   d", 5) == "a b c"
    assert snippet("杭州技术管理沙龙", 4) == "杭州技术"
    assert snippet("short", 400) == "short"
    assert snippet("abc", 0) == ""
    with pytest.raises(ValueError):
        snippet("abc", -1)


def test_snippet_from_a_prefix_is_the_snippet_of_the_whole_text():
    """The snippet collapses only a prefix of the text: it must equal collapsing all of it, then cutting."""
    rnd = random.Random(0)
    pieces = ["a", "bc", " ", "\n", "\t", "   ", "\u3000", "\r\n", "杭州"]
    texts = ["".join(rnd.choice(pieces) for _ in range(rnd.randint(0, 200))) for _ in range(2000)]
    for text in texts:
        for n in (0, 1, 3, 17, 120):
            assert snippet(text, n) == " ".join(text.split())[:n]

"""Held-out prompts of a target's own domain: ``Target.heldout`` and the corpora behind it."""

import json

import pytest

import spotref
from spotref.data import gsm
from spotref.data.corpora import GsmCorpus, StdlibCorpus, open_corpus
from spotref.data.stdlib_corpus import build_corpus
from spotref.load.targets import Target

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")


@pytest.fixture(scope="module")
def stdlib_target():
    return spotref.load_target("stdlib-b32")


@pytest.fixture(scope="module")
def stdlib_text():
    c = build_corpus()
    return [d.text for d in c.train], [d.text for d in c.heldout if d.name.startswith("code:")]


@pytest.mark.parametrize("split", [None, "train", "test"])
def test_stdlib_heldout_is_seeded_held_out_code(stdlib_target, stdlib_text, split):
    train, held = stdlib_text
    a = stdlib_target.heldout(6, seed=3, split=split)
    assert a == stdlib_target.heldout(6, seed=3, split=split)
    assert [p for p, _ in stdlib_target.heldout(6, seed=4, split=split)] != [p for p, _ in a]
    assert stdlib_target.heldout(3, seed=3, split=split) == a[:3]
    for prompt, answer in a:
        assert answer is None and isinstance(prompt, str) and len(prompt) > 100
        assert any(prompt in doc for doc in held), "not from a held-out code document"
        assert not any(prompt in doc for doc in train), "a held-out prompt is in a training document"


def test_stdlib_heldout_is_what_the_tools_drew_before(stdlib_target):
    """The demo's and quality's prompts (split None) and the drafter's / benchmark's texts
    (train / test, before their cut to tokens): the shipped numbers stay reproducible."""
    from workbench.bench.corpus import heldout_code
    from workbench.bench.quality import heldout_prompts

    assert [p for p, _ in stdlib_target.heldout(8, seed=0)] == heldout_prompts(8)
    assert [p for p, _ in stdlib_target.heldout(8, seed=1, split="test")] == heldout_code(8, seed=1, split="test")
    assert [p for p, _ in stdlib_target.heldout(8, seed=0, split="train")] == heldout_code(8, seed=0, split="train")


def test_stdlib_halves_share_no_document(stdlib_text):
    _, held = stdlib_text
    corpus = StdlibCorpus()
    source = lambda p: next(i for i, doc in enumerate(held) if p in doc)
    train = {source(p) for p, _ in corpus.heldout(40, 0, "train")}
    test = {source(p) for p, _ in corpus.heldout(40, 0, "test")}
    assert train and test and not train & test


def test_every_bundled_target_has_heldout_prompts():
    for name in spotref.list_targets():
        target = spotref.load_target(name)
        assert len(target.heldout(2, seed=0)) == 2, name


# --- gsm (the generator handed in, as the training tool does) ----------------------------


def test_gsm_heldout_is_seeded_chat_math_with_answers():
    corpus = GsmCorpus(gsm, seed=0, size=100, level=2)
    a = corpus.heldout(20, seed=7)
    assert a == corpus.heldout(20, seed=7) == gsm.heldout(20, 7, gsm.LEVELS[2])
    assert [p for p, _ in corpus.heldout(20, seed=8)] != [p for p, _ in a]
    for prompt, answer in a:
        assert prompt.startswith("<|im_start|>user\n") and prompt.endswith("<|im_start|>assistant\n")
        assert isinstance(answer, int) and 1 <= answer <= gsm.LEVELS[2].max_result


@pytest.mark.slow
def test_gsm_heldout_questions_are_not_trained_on():
    corpus = GsmCorpus(gsm, seed=0, size=3000, level=1)  # level 1: few distinct problems
    train = set(corpus.documents("train"))
    train_questions = {d.split("<|im_end|>")[0] for d in train}
    for split in (None, "train", "test"):
        for prompt, _ in corpus.heldout(200, seed=1, split=split):
            assert prompt.split("<|im_end|>")[0] not in train_questions, prompt


@pytest.mark.slow
def test_gsm_halves_are_disjoint_and_seeded():
    corpus = GsmCorpus(gsm, seed=0, size=10, level=3)
    train, test = corpus.heldout(100, 0, "train"), corpus.heldout(100, 0, "test")
    assert train == corpus.heldout(100, 0, "train") and len(train) == len(test) == 100
    assert not {p for p, _ in train} & {p for p, _ in test}


def test_a_gsm_record_rebuilds_the_corpus():
    corpus = GsmCorpus(gsm, seed=4, size=50, level=2)
    record = json.loads(json.dumps(corpus.record()))  # as the metadata stores it
    again = GsmCorpus.from_record(record, gsm)
    assert again.documents("train") == corpus.documents("train") == gsm.documents(50, 4, gsm.LEVELS[2])
    assert record["name"] == "gsm" and record["seed"] == 4 and record["version"] == gsm.VERSION
    with pytest.raises(ValueError, match="version"):
        GsmCorpus.from_record({**record, "version": gsm.VERSION + 1}, gsm)


# --- the metadata decides ------------------------------------------------------------------


def target_with(corpus_record):
    return Target("t", None, None, {} if corpus_record is None else {"corpus": corpus_record})


def test_the_corpus_record_picks_the_domain(tmp_path):
    docs = tmp_path / "docs.jsonl"
    lines = [json.dumps({"text": f"<|im_start|>user\nq{i}<|im_end|>\n<|im_start|>assistant\na{i}"}) for i in range(400)]
    docs.write_text("\n".join(lines) + "\n")
    t = target_with(open_corpus({"name": "file", "options": {"path": str(docs)}}).record())
    prompts = t.heldout(5, seed=2)
    assert prompts == t.heldout(5, seed=2) and all(a is None for _, a in prompts)
    assert all(p.endswith("<|im_start|>assistant\n") for p, _ in prompts)
    train = open_corpus(t.meta["corpus"]).documents("train")
    assert not any(doc.startswith(p) for p, _ in prompts for doc in train)
    # no record (the shipped targets' metadata predates the name): stdlib
    assert target_with(None).heldout(2, 0) == StdlibCorpus().heldout(2, 0)


def test_a_changed_corpus_file_is_refused(tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(f"document number {i}" for i in range(200)))
    record = open_corpus({"name": "file", "options": {"path": str(docs)}}).record()
    docs.write_text("\n".join(f"document number {i}" for i in range(201)))
    with pytest.raises(ValueError, match="changed since"):
        target_with(record).heldout(1, 0)


def test_a_gsm_target_gives_held_out_problems_with_answers():
    record = GsmCorpus(gsm, seed=0, size=10, level=1).record()
    target = target_with(record)
    pairs = target.heldout(5, 3)
    assert pairs == target.heldout(5, 3) and pairs != target.heldout(5, 4)
    assert all(p.endswith("<|im_start|>assistant\n") and isinstance(a, int) for p, a in pairs)
    train = set(GsmCorpus(gsm, seed=0, size=10, level=1).documents("train"))
    assert not any(p in doc for p, _ in pairs for doc in train)


@pytest.mark.parametrize(
    "kwargs, word",
    [
        ({"n": 0}, "n must"),
        ({"n": True}, "n must"),
        ({"n": 2.0}, "n must"),
        ({"seed": -1}, "seed must"),
        ({"seed": "0"}, "seed must"),
        ({"split": "val"}, "split must"),
    ],
)
def test_bad_heldout_arguments_name_the_argument(kwargs, word):
    args = {"n": 2, "seed": 0, "split": None, **kwargs}
    with pytest.raises(ValueError, match=word):
        target_with(None).heldout(**args)
    with pytest.raises(ValueError, match=word):
        GsmCorpus(gsm).heldout(**args)

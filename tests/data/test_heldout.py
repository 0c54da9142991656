"""Held-out prompts of a target's own domain: the corpora that draw them (``workbench.data``) and
``Target.heldout``'s shipped sets (tests/data/test_shipped_heldout.py holds those to the corpora)."""

import json
import platform

import pytest

import spotref
from spotref.load.targets import SHIPPED_HELDOUT, TARGETS_DIR, Target, read_meta
from workbench.data import gsm
from workbench.data.corpora import GsmCorpus, StdlibCorpus, open_corpus
from workbench.data.stdlib_corpus import build_corpus

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")

STDLIB_PYTHON = read_meta(TARGETS_DIR / "stdlib-b32.json")["corpus"]["python"]
# The shipped stdlib prompts are cut from the Python the stdlib targets were trained on; the
# corpus here is read from the running interpreter's standard library.
same_python = pytest.mark.skipif(
    platform.python_version() != STDLIB_PYTHON,
    reason=f"the shipped stdlib prompts are Python {STDLIB_PYTHON}'s text, this is {platform.python_version()}",
)


@pytest.fixture(scope="module")
def stdlib_target():
    return spotref.load_target("stdlib-b32")


@pytest.fixture(scope="module")
def stdlib_text():
    c = build_corpus()
    return [d.text for d in c.train], [d.text for d in c.heldout if d.name.startswith("code:")]


def held_out_code(pairs, stdlib_text) -> None:
    """Each pair is a text of a held-out code document (no answer), in no training document."""
    train, held = stdlib_text
    for prompt, answer in pairs:
        assert answer is None and isinstance(prompt, str) and len(prompt) > 100
        assert any(prompt in doc for doc in held), "not from a held-out code document"
        assert not any(prompt in doc for doc in train), "a held-out prompt is in a training document"


@pytest.mark.parametrize("split", [None, "train", "test"])
def test_stdlib_heldout_is_seeded_held_out_code(stdlib_text, split):
    corpus = StdlibCorpus()
    a = corpus.heldout(6, seed=3, split=split)
    assert a == corpus.heldout(6, seed=3, split=split)
    assert [p for p, _ in corpus.heldout(6, seed=4, split=split)] != [p for p, _ in a]
    assert corpus.heldout(3, seed=3, split=split) == a[:3]
    held_out_code(a, stdlib_text)


@same_python
@pytest.mark.parametrize("seed, split", SHIPPED_HELDOUT)
def test_the_shipped_stdlib_sets_are_held_out_code(stdlib_target, stdlib_text, seed, split):
    held_out_code(stdlib_target.heldout(16, seed, split), stdlib_text)


@same_python
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
    record = open_corpus({"name": "file", "options": {"path": str(docs)}}).record()
    corpus = open_corpus(json.loads(json.dumps(record)))  # as the metadata stores it
    prompts = corpus.heldout(5, seed=2)
    assert prompts == corpus.heldout(5, seed=2) and all(a is None for _, a in prompts)
    assert all(p.endswith("<|im_start|>assistant\n") for p, _ in prompts)
    train = corpus.documents("train")
    assert not any(doc.startswith(p) for p, _ in prompts for doc in train)
    # no record, or one without a name (the stdlib targets' metadata predates the name): stdlib
    assert open_corpus(None).heldout(2, 0) == open_corpus({"python": "3"}).heldout(2, 0) == StdlibCorpus().heldout(2, 0)


def test_a_changed_corpus_file_is_refused(tmp_path):
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(f"document number {i}" for i in range(200)))
    record = open_corpus({"name": "file", "options": {"path": str(docs)}}).record()
    docs.write_text("\n".join(f"document number {i}" for i in range(201)))
    with pytest.raises(ValueError, match="changed since"):
        open_corpus(record).heldout(1, 0)


def test_a_gsm_record_gives_held_out_problems_with_answers():
    record = GsmCorpus(gsm, seed=0, size=10, level=1).record()
    corpus = open_corpus(json.loads(json.dumps(record)))
    pairs = corpus.heldout(5, 3)
    assert pairs == corpus.heldout(5, 3) and pairs != corpus.heldout(5, 4)
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

"""The held-out prompts the installed package ships (``Target.heldout``, the files
``spotref/load/targets/heldout-*.json.gz``) are the workbench corpora's (``workbench.data``),
for every bundled target and shipped (seed, split); what is not shipped is refused by name."""

import gzip
import json
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from spotref.files import check_writable
from spotref.load.targets import (
    HELDOUT_FILE,
    SHIPPED_HELDOUT,
    TARGETS_DIR,
    Target,
    corpus_key,
    list_targets,
    read_meta,
    shipped_corpora,
    shipped_heldout,
)
from workbench.data import gsm
from workbench.data import heldout as tool
from workbench.data.corpora import GsmCorpus, open_corpus

ROOT = Path(__file__).resolve().parents[2]
N = tool.N
STDLIB_PYTHON = read_meta(TARGETS_DIR / "stdlib-b32.json")["corpus"]["python"]
OTHER_PYTHON = platform.python_version() != STDLIB_PYTHON  # the stdlib corpus here is this interpreter's text


def metadata_target(name: str) -> Target:
    """A bundled target's metadata alone (no weights: heldout reads the metadata only)."""
    return Target(name, None, None, read_meta(TARGETS_DIR / f"{name}.json"))


def representatives() -> dict:
    """{the first target of each distinct corpus record (``corpus_key``): the targets of that record}."""
    groups = {}
    for name in list_targets():
        key = json.dumps(corpus_key(read_meta(TARGETS_DIR / f"{name}.json").get("corpus")), sort_keys=True)
        groups.setdefault(key, []).append(name)
    return {names[0]: names for names in groups.values()}


@pytest.mark.slow
@pytest.mark.parametrize("name", sorted(representatives()))
def test_every_shipped_set_is_what_the_corpus_draws(name):
    """The drift check: the shipped sets, whole, equal the corpus record's draw, once per distinct
    record (the targets sharing one read the same sets: the test below)."""
    if name.startswith("stdlib") and OTHER_PYTHON:
        pytest.skip(
            f"the shipped stdlib prompts are Python {STDLIB_PYTHON}'s text, this is {platform.python_version()}"
        )
    target = metadata_target(name)
    corpus = open_corpus(target.meta.get("corpus"))
    for seed, split in SHIPPED_HELDOUT:
        assert target.heldout(N, seed, split) == corpus.heldout(N, seed, split), (name, seed, split)


def test_targets_of_one_corpus_record_read_the_same_shipped_sets():
    for first, names in representatives().items():
        for name in names:
            for seed, split in SHIPPED_HELDOUT:
                assert metadata_target(name).heldout(N, seed, split) == metadata_target(first).heldout(N, seed, split)


def test_the_first_shipped_gsm_problems_are_what_the_generator_draws():
    """The fast tier's drift check (the whole sets of every target: the test above)."""
    target = metadata_target("gsm-b32")
    corpus = open_corpus(target.meta["corpus"])
    for seed, split in SHIPPED_HELDOUT:
        assert target.heldout(40, seed, split) == corpus.heldout(40, seed, split), (seed, split)


def test_one_file_per_corpus_of_the_bundled_targets_names_them_all():
    corpora = tool.corpora_of_targets()
    assert shipped_corpora() == sorted(corpora) == ["gsm", "stdlib"]
    for name, (key, targets) in corpora.items():
        raw = json.loads(gzip.decompress((TARGETS_DIR / HELDOUT_FILE.format(corpus=name)).read_bytes()))
        assert raw["corpus"] == key and raw["targets"] == targets
        assert [(s["seed"], s["split"]) for s in raw["sets"]] == list(SHIPPED_HELDOUT)
        assert all(len(s["prompts"]) == len(s["answers"]) == N for s in raw["sets"])
    assert corpora["gsm"][1] == ["gsm-b16", "gsm-b32", "gsm-dream", "gsm-llada", "gsm-llada2", "gsm-moe"]
    assert corpora["stdlib"][1] == ["stdlib-b16", "stdlib-b32", "stdlib-b32-d192"]
    # the gsm targets' records differ in their training alone (the corpus seed, the generator's module)
    records = [read_meta(TARGETS_DIR / f"{t}.json")["corpus"] for t in corpora["gsm"][1]]
    assert len({r["seed"] for r in records}) > 1 and len({json.dumps(corpus_key(r)) for r in records}) == 1


def test_shipped_sets_are_prefix_consistent_and_answered():
    gsm, stdlib = metadata_target("gsm-b16"), metadata_target("stdlib-b32")
    for seed, split in SHIPPED_HELDOUT:
        for target in (gsm, stdlib):
            whole = target.heldout(N, seed, split)
            assert len(whole) == N and target.heldout(3, seed, split) == whole[:3] == target.heldout(6, seed, split)[:3]
        assert all(isinstance(a, int) and p.endswith("<|im_start|>assistant\n") for p, a in gsm.heldout(N, seed, split))
        assert all(a is None and len(p) > 100 for p, a in stdlib.heldout(N, seed, split))
    # the halves share no problem; the whole set draws its own
    train, test = (set(gsm.heldout(N, s, p)) for s, p in SHIPPED_HELDOUT[1:])
    assert not train & test


@pytest.mark.parametrize(
    "seed, split",
    [(1, None), (2, None), (0, "test"), (1, "train"), (3, "test")],
)
def test_a_seed_and_split_not_shipped_is_refused_naming_what_is(seed, split):
    with pytest.raises(ValueError) as e:
        metadata_target("gsm-b32").heldout(2, seed, split)
    message = str(e.value)
    assert f"seed {seed} with split {split!r} is not shipped" in message
    assert "(0, None), (0, 'train'), (1, 'test')" in message and "workbench.data.corpora" in message


def test_more_prompts_than_shipped_are_refused_naming_the_count():
    for name in ("gsm-b32", "stdlib-b16"):
        with pytest.raises(ValueError, match=f"n must be at most {N} .*{N} held-out prompts are shipped.*workbench"):
            metadata_target(name).heldout(N + 1)


def test_a_corpus_not_shipped_is_refused_naming_the_shipped_ones(tmp_path):
    """A target trained on another corpus (another gsm level, a file, no record at all)."""
    level1 = GsmCorpus(gsm, seed=0, size=10, level=1).record()
    docs = tmp_path / "docs.txt"
    docs.write_text("\n".join(f"document number {i}" for i in range(300)))
    file_record = open_corpus({"name": "file", "options": {"path": str(docs)}}).record()
    for record, name in ((level1, "gsm"), (file_record, "file"), (None, "stdlib")):
        target = Target("mine", None, None, {} if record is None else {"corpus": record})
        with pytest.raises(ValueError, match=f"'mine''s corpus \\('{name}'\\) are not shipped") as e:
            target.heldout(2)
        assert "bundled targets' corpora (gsm, stdlib)" in str(e.value) and "workbench" in str(e.value)


HIDDEN = """
import sys
sys.modules["workbench"] = None  # import workbench raises ImportError
import spotref
from spotref.load.targets import SHIPPED_HELDOUT, Target, list_targets, read_meta, TARGETS_DIR
for name in list_targets():
    t = Target(name, None, None, read_meta(TARGETS_DIR / f"{name}.json"))
    for seed, split in SHIPPED_HELDOUT:
        assert len(t.heldout(%d, seed, split)) == %d
from spotref.cli import demo, main
from spotref.record import prompts
assert len(demo.target_setup("gsm-b32", 4).prompts) == 4  # the demo's own prompts
loaded = sorted(m for m, mod in sys.modules.items() if m.startswith("workbench") and mod is not None)
print("workbench modules loaded:", loaded)
"""


@pytest.mark.slow
def test_heldout_and_the_demo_work_with_the_workbench_not_importable():
    out = subprocess.run([sys.executable, "-c", HIDDEN % (N, N)], capture_output=True, text=True, cwd=ROOT, timeout=300)
    assert out.returncode == 0, out.stderr
    assert "workbench modules loaded: []" in out.stdout


def test_the_tool_writes_a_directory_the_installed_reader_reads(tmp_path):
    written = tool.write_heldout(tmp_path, n=4)
    assert sorted(p.name for p in written) == ["heldout-gsm.json.gz", "heldout-stdlib.json.gz"]
    for corpus in ("gsm",) if OTHER_PYTHON else ("gsm", "stdlib"):
        mine = shipped_heldout(corpus, tmp_path)
        assert mine["corpus"] == shipped_heldout(corpus)["corpus"]
        assert mine["sets"] == {k: v[:4] for k, v in shipped_heldout(corpus)["sets"].items()}
    # the stdlib prompts are slices of the held-out files, each stored once
    raw = json.loads(gzip.decompress((tmp_path / "heldout-stdlib.json.gz").read_bytes()))
    assert all(isinstance(p, list) for s in raw["sets"] for p in s["prompts"])
    assert len({d["name"] for d in raw["documents"]}) == len(raw["documents"]) <= 19
    with pytest.raises(ValueError, match="shipped file"):
        check_writable(TARGETS_DIR / "heldout-gsm.json.gz")  # the tool needs --update-shipped for these


def test_the_tool_writes_the_shipped_directory_only_with_the_flag(capsys, monkeypatch):
    monkeypatch.setattr(
        tool, "write_heldout", lambda out, n, directory: [check_writable(Path(out, "heldout-gsm.json.gz"))]
    )
    assert tool.main(["--out", str(TARGETS_DIR), "--n", "2"]) == 2
    assert "shipped file" in capsys.readouterr().err
    assert tool.main(["--update-shipped", "--n", "2"]) == 0  # the flag lets the write guard pass

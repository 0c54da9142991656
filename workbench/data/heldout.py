"""The held-out prompts the installed package ships: ``Target.heldout``'s sets, drawn here.

The installed ``spotref`` holds no corpus generator: ``Target.heldout`` reads the first ``N``
held-out pairs of each (seed, split) of ``spotref.load.targets.SHIPPED_HELDOUT`` from a file
beside the bundled targets, one per corpus of theirs (``HELDOUT_FILE``: ``heldout-gsm.json.gz``,
``heldout-stdlib.json.gz``). This tool draws those sets from the corpora (``open_corpus`` on each
bundled target's metadata record) and writes the files::

    python -m workbench.data.heldout [--out DIR]     # into a run directory (default runs/heldout-*)
    python -m workbench.data.heldout --update-shipped  # into spotref/load/targets/ (the shipped files)

Targets whose corpus records agree but for the fields of their training alone (``corpus_key``:
the corpus seed and size, the generator's module name) share one corpus; the tool checks that
they draw the same prompts before writing that corpus's file once. A stdlib prompt is stored as a
slice ``[document, start, stop]`` of one of the held-out files it was cut from, each file stored
once (a prompt is 2,000 or 4,000 characters of one of 19 files); a gsm prompt as its text.
``tests/data/test_shipped_heldout.py`` checks the shipped files against the corpora.
"""

from __future__ import annotations

import argparse
import gzip
import json
from pathlib import Path

from spotref.cli.argtypes import guarded, positive_int
from spotref.files import atomic_write, run_dir, shipped_writes
from spotref.load.targets import (
    HELDOUT_FILE,
    SHIPPED_HELDOUT,
    TARGETS_DIR,
    corpus_key,
    list_targets,
    read_meta,
)
from workbench.data.corpora import open_corpus

PROG = "python -m workbench.data.heldout"
N = 1024  # pairs per (seed, split): the largest use is 360 (docs/drafter.md's --prompts 360); room to spare


def corpora_of_targets(directory: Path = TARGETS_DIR) -> dict[str, tuple[dict, list[str]]]:
    """{corpus name: (its key, the bundled targets trained on it)}; ``ValueError`` where two
    targets name one corpus with different keys (one file per corpus name could not hold both)."""
    out = {}
    for name in list_targets(directory):
        key = corpus_key(read_meta(Path(directory, f"{name}.json")).get("corpus"))
        known, names = out.setdefault(key["name"], (key, []))
        if known != key:
            raise ValueError(
                f"the targets {names[0]!r} and {name!r} name the {key['name']!r} corpus with different "
                f"records: one shipped file per corpus cannot hold both"
            )
        names.append(name)
    return out


def drawn_sets(record: dict | None, n: int) -> dict:
    """{(seed, split): the first ``n`` held-out pairs} of the corpus a metadata record names."""
    corpus = open_corpus(record)
    return {(seed, split): corpus.heldout(n, seed, split) for seed, split in SHIPPED_HELDOUT}


def heldout_sets(names: list[str], n: int, directory: Path = TARGETS_DIR) -> dict:
    """The sets of one corpus, drawn from each target's record; ``ValueError`` where the
    targets that share the corpus draw different prompts."""
    sets = None
    for name in names:
        mine = drawn_sets(read_meta(Path(directory, f"{name}.json")).get("corpus"), n)
        if sets is not None and mine != sets:
            raise ValueError(f"the targets {names[0]!r} and {name!r} share a corpus record but draw other prompts")
        sets = mine
    return sets


def source_documents(record: dict | None) -> list[tuple[str, str]]:
    """(name, text) of the documents a corpus's prompts are slices of: the stdlib corpus's
    held-out files; none for the others (a gsm prompt is stored whole)."""
    corpus = open_corpus(record)
    return [(d.name, d.text) for d in corpus.corpus.heldout] if corpus.name == "stdlib" else []


def encoded(key: dict, targets: list[str], sets: dict, documents: list[tuple[str, str]]) -> bytes:
    """The file's bytes (gzip'd JSON, no time stamp: the same sets give the same bytes): each
    prompt a slice of the first document holding it, else its text; the documents used, once."""
    used, slices = {}, {}
    for pairs in sets.values():
        for prompt, _ in pairs:
            found = next(((i, t.find(prompt)) for i, (_, t) in enumerate(documents) if prompt in t), None)
            if found is not None:
                i, start = found
                slices[prompt] = (used.setdefault(i, len(used)), start, start + len(prompt))
    docs = [{"name": documents[i][0], "text": documents[i][1]} for i in sorted(used, key=used.get)]
    out = {
        "written_by": f"{PROG} --update-shipped",
        "corpus": key,
        "targets": targets,
        "documents": docs,
        "sets": [
            {
                "seed": seed,
                "split": split,
                "prompts": [list(slices[p]) if p in slices else p for p, _ in pairs],
                "answers": [a for _, a in pairs],
            }
            for (seed, split), pairs in sets.items()
        ],
    }
    return gzip.compress(json.dumps(out, separators=(",", ":")).encode("utf-8"), mtime=0)


def write_heldout(out_dir: Path, n: int = N, directory: Path = TARGETS_DIR) -> list[Path]:
    """Draw every bundled corpus's sets and write one file per corpus into ``out_dir``
    (atomically; the write guard refuses the shipped directory outside ``shipped_writes``)."""
    written = []
    for name, (key, targets) in sorted(corpora_of_targets(directory).items()):
        record = read_meta(Path(directory, f"{targets[0]}.json")).get("corpus")
        sets = heldout_sets(targets, n, directory)
        data = encoded(key, targets, sets, source_documents(record))
        path = Path(out_dir, HELDOUT_FILE.format(corpus=name))
        atomic_write(path, lambda f, data=data: f.write(data))
        written.append(path)
    return written


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog=PROG, description=__doc__.splitlines()[0])
    where = p.add_mutually_exclusive_group()
    where.add_argument("--out", default=None, help="the directory to write into (default: a new runs/heldout-*)")
    where.add_argument("--update-shipped", action="store_true", help=f"write into {TARGETS_DIR} (the shipped files)")
    p.add_argument("--n", type=positive_int, default=N, help=f"pairs per (seed, split) (default {N})")
    p.add_argument(
        "--targets-dir", default=None, help="draw the sets of the targets in this directory (default: the bundled)"
    )
    args = p.parse_args(argv)
    return guarded(PROG, lambda: run(args))


def run(args) -> int:
    out = TARGETS_DIR if args.update_shipped else Path(args.out) if args.out else run_dir("heldout")
    out.mkdir(parents=True, exist_ok=True)
    with shipped_writes(args.update_shipped):  # the flag is what lets the shipped files change
        for path in write_heldout(out, args.n, Path(args.targets_dir or TARGETS_DIR)):
            print(f"wrote {path} ({path.stat().st_size:,} bytes)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())

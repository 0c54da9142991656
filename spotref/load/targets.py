"""Bundled targets: small real SDAR models trained here (``spotref.train.train_target``) on grade-school
math (``gsm-*``, the default ``gsm-b32``) and on Python's own text (``stdlib-*``); a target may be
of any family (``MODELS``: SDAR, LLaDA, Dream).

Each target is its metadata ``NAME.json`` in ``spotref/load/targets/`` (family, config, tokenizer,
corpus, training command and time, held-out loss, quality numbers) and the two files it names
beside it: float16 weights (``NAME.safetensors``) under the names of the family's model, which
are also its checkpoint's names (``SDARModel``'s HF names; ``LLaDAModel``'s and ``DreamModel``'s
as their ``save_pretrained`` writes them), and the tokenizer (``NAME.tokenizer.json``), each with
its SHA-256, checked at load time so a corrupt, truncated or swapped file fails loudly. Each
file is stored once: targets with the same weights (one run exported at two block sizes) or the
same tokenizer name one file. The repository's ``workbench.target_writer.save_target`` writes a
target so (the trainer's export calls it), the metadata last. The metadata's ``family``
("sdar", "llada", "dream"; absent: "sdar") picks the model class, and its ``config`` is that
family's config in its own keys (``SDARConfig``, ``LLaDAConfig``, ``DreamConfig``: ``to_dict``).
Beside them, one file per corpus of theirs holds its held-out prompts (``heldout-CORPUS.json.gz``: ``Target.heldout``,
drawn by the repository's ``python -m workbench.data.heldout``).

>>> import spotref
>>> "stdlib-b32" in spotref.list_targets()
True
>>> target = spotref.load_target("stdlib-b32")
>>> target.model.block_size, target.tokenizer.decode(target.tokenizer.encode("def f(x):"))
(32, 'def f(x):')
"""

from __future__ import annotations

import functools
import gzip
import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path

import torch

from spotref.checkpoint import read_json
from spotref.configs import CONFIGS, SDARMoEConfig, check_field_types
from spotref.configs_llada2 import LLaDA2Config
from spotref.load.bpe import tokenizer_from_json
from spotref.load.tokenizer import chat_format
from spotref.spec.checks import check_int
from spotref.spec.decode import BLOCK_CAUSAL
from spotref.spec.dream import DreamModel
from spotref.spec.llada import LLaDAModel
from spotref.spec.llada2 import LLaDA2Model
from spotref.spec.sdar import SDARModel
from spotref.spec.sdar_moe import SDARMoEModel

TARGETS_DIR = Path(__file__).parent / "targets"
DEFAULT_TARGET = "gsm-b32"
CHAT_CORPORA = ("gsm",)  # the corpora of chat-formatted documents (workbench.data.gsm.chat_document)
MAX_HELDOUT = 100_000  # held-out prompts one call may ask for (10**9 ran without bound)
# The held-out sets shipped beside the targets, as (seed, split): the demo's and the quality
# reports' (0, None), the drafters' training and calibration prompts (0, "train") and their
# test and benchmark prompts (1, "test"); written by ``python -m workbench.data.heldout``.
SHIPPED_HELDOUT = ((0, None), (0, "train"), (1, "test"))
HELDOUT_FILE = "heldout-{corpus}.json.gz"  # one per corpus of the bundled targets
TRAINING_ONLY = ("seed", "options", "generator")  # corpus record fields no held-out prompt depends on
FROM_WORKBENCH = (
    "the repository's workbench draws others "
    "(workbench.data.corpora.open_corpus(target.meta.get('corpus')).heldout(n, seed, split)), and writes "
    "the sets of the targets of a directory DIR beside them "
    "(python -m workbench.data.heldout --targets-dir DIR --out DIR)"
)
MODELS = {"sdar": SDARModel, "llada": LLaDAModel, "llada2": LLaDA2Model, "dream": DreamModel}  # "family" -> model
CONFIG_OF = {SDARMoEModel: SDARMoEConfig, LLaDA2Model: LLaDA2Config}  # a model whose config is not its family's


def model_of(meta: dict):
    """The model class of a target's metadata: its family's (``MODELS``), SDAR-MoE's for an SDAR
    config naming experts."""
    family = family_of(meta)
    return SDARMoEModel if family == "sdar" and "num_experts" in meta.get("config", {}) else MODELS[family]


@dataclass
class Target:
    name: str
    model: SDARModel | LLaDAModel | DreamModel  # the metadata's family; eval mode, float32
    tokenizer: object  # encode(str) -> list[int], decode(list[int]) -> str
    meta: dict
    directory: Path = TARGETS_DIR  # where it was loaded from: its held-out sets are looked for there first

    @property
    def eos_id(self) -> int:
        return self.tokenizer.eos_id

    @property
    def stop_ids(self) -> list[int]:
        return [self.tokenizer.eos_id]

    def encode(self, text: str) -> list[int]:
        """The prompt's token ids; ``ValueError`` if it does not encode."""
        return self.tokenizer.encode(text)

    @property
    def chat(self) -> bool:
        """Whether the target was trained on chat-formatted documents (the gsm targets): prompt
        it with ``encode_chat``."""
        return ((self.meta or {}).get("corpus") or {}).get("name") in CHAT_CORPORA

    def encode_chat(self, messages, **kwargs) -> list[int]:
        """A chat prompt's token ids, in SDAR's (Qwen3's) template ending in the assistant header,
        as the chat targets were trained (``spotref.load.tokenizer.chat_format``: a question as
        a str, or a list of {"role", "content"} turns); ``ValueError`` for a plain-text target."""
        if not self.chat:
            raise ValueError(f"target {self.name!r} is trained on plain text: prompt it with encode(text)")
        return self.tokenizer.encode(chat_format(messages, **kwargs))

    def heldout(self, n: int, seed: int = 0, split: str | None = None) -> list[tuple[str, int | None]]:
        """``n`` held-out ``(prompt text, answer or None)`` pairs of the target's own domain (its
        metadata's corpus), a pure function of ``(n, seed, split)``: the first ``n`` of a set
        shipped beside the bundled targets (``HELDOUT_FILE``), drawn by the repository's
        workbench from the corpus (``workbench.data.corpora``); no prompt comes from a training
        document. split: None (the whole held-out set), ``"train"`` or ``"test"`` (two halves
        that share no document: drafter training vs evaluation). Code targets have no answers
        (None). The sets shipped are ``SHIPPED_HELDOUT``'s (seed, split) pairs of the bundled
        targets' corpora; another seed, split or corpus, or more prompts than a set holds, is
        a ``ValueError`` naming what is shipped.

        >>> import spotref
        >>> prompt, answer = spotref.load_target("stdlib-b32").heldout(1, seed=0)[0]
        >>> type(prompt).__name__, answer
        ('str', None)
        """
        check_int("heldout: n", n, 1, MAX_HELDOUT)
        check_int("heldout: seed", seed, 0)
        if split not in (None, "train", "test"):
            raise ValueError(f"heldout: split must be None, 'train' or 'test', got {split!r}")
        shipped = ", ".join(f"({s}, {p!r})" for s, p in SHIPPED_HELDOUT)
        if (seed, split) not in SHIPPED_HELDOUT:
            raise ValueError(
                f"heldout: seed {seed} with split {split!r} is not shipped: the installed package ships "
                f"the held-out prompts of (seed, split) {shipped}; {FROM_WORKBENCH}"
            )
        key = corpus_key(self.meta.get("corpus"))
        found = (shipped_heldout(key["name"], d) for d in dict.fromkeys([str(self.directory), str(TARGETS_DIR)]))
        sets = next((s for s in found if s is not None and s["corpus"] == key), None)
        if sets is None:
            raise ValueError(
                f"heldout: the held-out prompts of {self.name!r}'s corpus ({key['name']!r}) are not shipped: "
                f"the installed package ships those of the bundled targets' corpora "
                f"({', '.join(shipped_corpora())}); {FROM_WORKBENCH}"
            )
        pairs = sets["sets"][(seed, split)]
        if n > len(pairs):
            raise ValueError(
                f"heldout: n must be at most {len(pairs)} for the {key['name']!r} corpus: {len(pairs)} held-out "
                f"prompts are shipped per (seed, split); {FROM_WORKBENCH}"
            )
        return pairs[:n]


def corpus_key(record: dict | None) -> dict:
    """What of a target's corpus record its held-out prompts depend on: the record less the
    fields of its training alone (``TRAINING_ONLY``: the corpus seed and size, the generator's
    module), its name "stdlib" where it has none (the targets that predate the field)."""
    return {"name": "stdlib", **{k: v for k, v in (record or {}).items() if k not in TRAINING_ONLY}}


def shipped_corpora(directory: Path | str = TARGETS_DIR) -> list[str]:
    """The names of the corpora whose held-out sets are shipped, sorted."""
    head, tail = HELDOUT_FILE.split("{corpus}")
    return sorted(p.name[len(head) : -len(tail)] for p in Path(directory).glob(HELDOUT_FILE.format(corpus="*")))


def shipped_heldout(corpus: str, directory: Path | str = TARGETS_DIR) -> dict | None:
    """The held-out sets of a corpus in ``directory`` (None where there are none):
    ``{"corpus": its key (corpus_key), "sets": {(seed, split): [(prompt, answer), ...]}}``.
    The file (gzip'd JSON) holds each set's prompts and answers; a prompt is its text, or
    ``[document, start, stop]``, a slice of one of the file's ``documents`` (the stdlib
    corpus's held-out files, each stored once). Read once per version of the file."""
    path = Path(directory, HELDOUT_FILE.format(corpus=corpus))
    if not path.is_file():
        return None
    return read_heldout(str(path), path.stat().st_mtime_ns)


@functools.lru_cache(maxsize=16)
def read_heldout(path: str, mtime_ns: int) -> dict:
    """``shipped_heldout``'s reading of the file ``path`` as of ``mtime_ns`` (the cache's key)."""
    try:
        raw = json.loads(gzip.decompress(Path(path).read_bytes()).decode("utf-8"))
        docs = [d["text"] for d in raw["documents"]]
        text = lambda p: p if isinstance(p, str) else docs[p[0]][p[1] : p[2]]
        pairs = lambda s: [(text(p), a) for p, a in zip(s["prompts"], s["answers"], strict=True)]
        sets = {(s["seed"], s["split"]): pairs(s) for s in raw["sets"]}
    except (OSError, ValueError, KeyError, TypeError, IndexError) as e:
        raise ValueError(f"the shipped held-out prompts {path} cannot be read: {e}") from None
    return {"corpus": raw["corpus"], "sets": sets}


def list_targets(directory: Path | str = TARGETS_DIR) -> list[str]:
    """Names of the bundled targets (a metadata file whose weights file is there), sorted."""
    return sorted(p.stem for p in metadata_files(directory) if weights_of(p).exists())


def metadata_files(directory: Path | str) -> list[Path]:
    """The targets' metadata files ``NAME.json`` of a directory (its tokenizers left out)."""
    return [p for p in Path(directory).glob("*.json") if not p.name.endswith(".tokenizer.json")]


def weights_of(meta_path: Path) -> Path:
    """The weights file a target's metadata names; ``NAME.safetensors`` where the metadata cannot
    be read (``load_target`` then names what is wrong with it)."""
    try:
        return inside(meta_path, _files_named(meta_path)[0], "weights.file")
    except (IndexError, TypeError, ValueError):
        return meta_path.with_suffix(".safetensors")


@dataclass(frozen=True)
class Shape:
    """A model as its metadata describes it, no weight read: its config, family and block size,
    which is all the argument checks of a decode read of a model (``api.check_decode``), so a bad
    ``block_length`` or ``max_new_tokens`` is refused before the weights load."""

    config: object  # the family's config (``SDARConfig``, ``LLaDAConfig``, ``DreamConfig``)
    family: str
    block_size: int

    @property
    def mask_id(self):
        return self.config.mask_token_id


def target_shape(name: str, directory: Path | str = TARGETS_DIR) -> Shape | None:
    """The ``Shape`` of the bundled target ``name`` from its metadata ``NAME.json`` alone; None
    where it is no bundled target or its metadata cannot be read (``load_target`` names why)."""
    if not isinstance(name, str) or name not in list_targets(directory):
        return None
    path = Path(directory, f"{name}.json")
    try:
        meta = read_meta(path)
        cls = model_of(meta)
        cfg = target_config(meta["config"], path, cls)
    except (ValueError, TypeError, KeyError, AttributeError):
        return None
    block_size = cfg.block_size if family_of(meta) in BLOCK_CAUSAL else cls.block_size
    known = block_size is not None and cfg.mask_token_id is not None
    return Shape(cfg, family_of(meta), block_size) if known else None


def load_target(name: str | os.PathLike = DEFAULT_TARGET, directory: Path | str = TARGETS_DIR) -> Target:
    """A bundled target by name (``list_targets()``), or by the path (str or ``Path``) of its
    ``NAME.json``. A bad name, metadata file or weights file raises ``ValueError`` naming it."""
    if isinstance(name, os.PathLike):
        name = os.fspath(name)
    if not isinstance(name, str):
        raise ValueError(f"target name must be a str or a path, got {type(name).__name__}")
    meta_path = Path(name) if name.endswith(".json") else Path(directory, f"{name}.json")
    if not name.endswith(".json") and name not in list_targets(directory):
        known = ", ".join(list_targets(directory)) or "none"
        raise ValueError(f"unknown target {name!r}; known targets: {known}")
    if not meta_path.is_file():
        raise ValueError(f"no target metadata at {meta_path}")
    meta = read_meta(meta_path)
    tokenizer = _load_tokenizer(
        inside(meta_path, meta["tokenizer"]["file"], "tokenizer.file"), meta["tokenizer"].get("sha256")
    )
    model = _load_model(inside(meta_path, meta["weights"]["file"], "weights.file"), meta, meta_path)
    check_pair(model.config, tokenizer, meta_path)
    return Target(meta.get("name", meta_path.stem), model, tokenizer, meta, meta_path.parent)


def inside(meta_path: Path, name: str, field: str) -> Path:
    """A file the metadata names: a plain file name beside the metadata, not a path elsewhere
    (the weights are checked against their SHA-256 whatever the file is)."""
    if not name or Path(name).name != name or name in (".", ".."):
        raise ValueError(
            f"the target metadata {meta_path}: {field} {name!r} must name a file beside it (no directories)"
        )
    return meta_path.parent / name


def check_pair(cfg, tokenizer, meta_path: Path) -> None:
    """The tokenizer fits the model: the same MASK id, and every id it makes is in the vocabulary."""
    if tokenizer.mask_id != cfg.mask_token_id:
        raise ValueError(
            f"the target {meta_path}: the tokenizer's MASK id is {tokenizer.mask_id}, the "
            f"model's mask_token_id {cfg.mask_token_id}"
        )
    if tokenizer.vocab_size != cfg.vocab_size:
        raise ValueError(
            f"the target {meta_path}: the tokenizer has {tokenizer.vocab_size} ids, the "
            f"model's vocabulary {cfg.vocab_size}"
        )


# The metadata fields load_target reads, and the JSON type of each.
META_FIELDS = {
    "config": dict,
    "weights": dict,
    "tokenizer": dict,
    "weights.file": str,
    "weights.bytes": int,
    "weights.sha256": str,
    "tokenizer.file": str,
    "family": str,
}


def read_meta(path: Path) -> dict:
    """The target metadata ``NAME.json``: a JSON object with every field ``META_FIELDS`` lists."""
    meta = read_json(path, "the target metadata")
    for field, kind in META_FIELDS.items():
        head, _, key = field.partition(".")
        value = meta.get(head, "sdar" if field == "family" else None) if not key else meta[head].get(key)
        if value is None:
            raise ValueError(f"the target metadata {path} has no {field!r} field")
        if not isinstance(value, kind) or isinstance(value, bool):
            json_type = {dict: "an object", str: "a string", int: "an integer"}[kind]
            raise ValueError(f"the target metadata {path}: {field!r} must be {json_type}, got {value!r}")
    if family_of(meta) not in MODELS:
        known = ", ".join(map(repr, MODELS))
        raise ValueError(f"the target metadata {path}: 'family' must be one of {known}, got {meta['family']!r}")
    return meta


def family_of(meta: dict) -> str:
    """The metadata's ``family``; absent: "sdar" (the shipped targets' metadata names none)."""
    return meta.get("family", "sdar")


def _load_tokenizer(path: Path, sha256: str | None = None):
    """The tokenizer file, checked against the metadata's SHA-256 when it records one (an export
    killed between its files then fails here by name rather than pairing another tokenizer)."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ValueError(f"cannot load the tokenizer {path}: {e}") from None
    if sha256 is not None and hashlib.sha256(raw).hexdigest() != sha256:
        raise ValueError(
            f"the tokenizer file {path} does not match the metadata's SHA-256: "
            f"it is another tokenizer (an interrupted export?)"
        )
    try:
        return tokenizer_from_json(raw.decode("utf-8"))
    except (OSError, ValueError, Exception) as e:  # tokenizers raises its own Exception
        raise ValueError(f"cannot load the tokenizer {path}: {e}") from None


def _load_model(path: Path, meta: dict, meta_path: Path | None = None):
    """Weights checked against the metadata's size and SHA-256 before they are parsed."""
    try:
        from safetensors.torch import load  # optional dependency (the [cli] extra)
    except ImportError:
        raise ImportError("loading a target needs 'safetensors': pip install 'spotref[cli]'") from None
    if not path.is_file():
        raise ValueError(f"the weights file {path} is missing")
    raw, want = path.read_bytes(), meta["weights"]
    if len(raw) != want["bytes"]:
        raise ValueError(
            f"the weights file {path} is truncated or corrupt: {len(raw)} bytes, the metadata says {want['bytes']}"
        )
    if hashlib.sha256(raw).hexdigest() != want["sha256"]:
        raise ValueError(f"the weights file {path} is corrupt: its SHA-256 does not match the metadata")
    try:
        sd = load(raw)
    except Exception as e:  # safetensors' own error types
        raise ValueError(f"the weights file {path} cannot be parsed: {e}") from None
    cls = model_of(meta)
    return build_model(target_config(meta["config"], meta_path or path, cls), sd, cls)


def target_config(raw: dict, path: Path, cls=SDARModel):
    """The metadata's ``config`` as the family's config (``spotref.configs.CONFIGS``), its field types
    and stated keys checked as a checkpoint's config.json."""
    try:
        check_field_types(raw)
        config_class = CONFIG_OF.get(cls) or CONFIGS[getattr(cls, "family", "sdar")]
        config_class.check_stated(raw)
        return config_class.from_dict(raw)
    except (TypeError, ValueError) as e:
        raise ValueError(f"the target metadata {path}: config: {e}") from None


def build_model(cfg, state_dict: dict, cls=SDARModel):
    """An eval-mode float32 ``cls`` (a family's model) from a (possibly tied, float16) state dict."""
    model = cls(cfg)
    state_dict = with_tied(model, state_dict)
    bad = [k for k, v in state_dict.items() if not torch.isfinite(v).all()]
    if bad:
        raise ValueError(f"the weights hold non-finite values (NaN or inf) in {', '.join(bad[:6])}")
    want = model.state_dict()
    wrong = [
        f"{k} {tuple(v.shape)} (config wants {tuple(want[k].shape)})"
        for k, v in sorted(state_dict.items())
        if k in want and v.shape != want[k].shape
    ]
    if wrong:
        more = f" and {len(wrong) - 4} more" if len(wrong) > 4 else ""
        raise ValueError(
            f"the weights do not match the config: {len(wrong)} wrong-shaped tensor(s): {', '.join(wrong[:4])}{more}"
        )
    missing, unexpected = model.load_state_dict({k: v.float() for k, v in state_dict.items()}, strict=False)
    if missing or unexpected:
        raise ValueError(f"the weights do not match the config: missing {missing}, unexpected {unexpected}")
    return model.float().eval()


def with_tied(model, state_dict: dict) -> dict:
    """``state_dict`` with a tied tensor under each of its names (a tied head stored under the
    embedding's name only, as ``save_target`` writes it)."""
    out, first = dict(state_dict), {}
    for name, t in model.state_dict(keep_vars=True).items():
        first.setdefault(id(t), name)
        if name not in out and first[id(t)] in out:
            out[name] = out[first[id(t)]]
    return out


def _files_named(meta_path: Path) -> tuple:
    """The weights and tokenizer files a target's metadata names (none where it cannot be read)."""
    try:
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        return meta["weights"]["file"], meta["tokenizer"]["file"]
    except (OSError, ValueError, KeyError, TypeError):
        return ()


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()

"""Bad files: checkpoint directories, bundled-target metadata and drafter checkpoints. Each is a
``ValueError`` naming the file and the field, shard or tensor at fault, raised at load time."""

import json
import os
import shutil
from pathlib import Path

import pytest
import torch

import spotref
from spotref.checkpoint import from_pretrained
from spotref.configs import SDARConfig
from spotref.load.drafters import ORDER_DIR
from spotref.load.targets import DEFAULT_TARGET, TARGETS_DIR
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained

pytest.importorskip("safetensors")
INDEX = "model.safetensors.index.json"


def tiny(tie=False) -> SDARModel:
    torch.manual_seed(0)
    return SDARModel(SDARConfig(vocab_size=300, mask_token_id=299, block_size=8, tie_word_embeddings=tie)).eval()


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """A sharded and a single-file checkpoint, written once; tests work on copies."""
    root = tmp_path_factory.mktemp("saved")
    return save_pretrained(tiny(), root / "sharded", max_shard_bytes=30_000), save_pretrained(tiny(), root / "single")


@pytest.fixture
def sharded(saved, tmp_path):
    return Path(shutil.copytree(saved[0], tmp_path / "ckpt"))


@pytest.fixture
def single(saved, tmp_path):
    return Path(shutil.copytree(saved[1], tmp_path / "ckpt"))


def edit_json(path: Path, fn):
    d = json.loads(path.read_text())
    fn(d)
    path.write_text(json.dumps(d))


def load_error(path, **kw) -> str:
    with pytest.raises(ValueError) as e:
        from_pretrained(path, **kw)
    return str(e.value)


# ---- checkpoints: shard names in the index ---------------------------------------------------


def set_shard(root: Path, shard):
    def fn(d):
        d["weight_map"]["model.norm.weight"] = shard

    edit_json(root / INDEX, fn)


@pytest.mark.parametrize(
    "shard",
    [
        "../outside.safetensors",
        "sub/../../outside.safetensors",
        "/etc/passwd",
        "..",
        "..\\outside.safetensors",
        "C:outside",
    ],
)
def test_shard_outside_the_checkpoint_is_refused(sharded, shard):
    """Refused by name, even when the file it points to exists and would load."""
    first = json.loads((sharded / INDEX).read_text())["weight_map"]["model.norm.weight"]
    shutil.copy(sharded / first, sharded.parent / "outside.safetensors")
    set_shard(sharded, shard)
    msg = load_error(sharded)
    assert repr(shard) in msg and "outside the checkpoint directory" in msg and "model.norm.weight" in msg


def test_shard_symlink_leading_outside_is_refused(sharded, tmp_path):
    outside = tmp_path / "elsewhere.safetensors"
    shard = json.loads((sharded / INDEX).read_text())["weight_map"]["model.norm.weight"]
    shutil.copy(sharded / shard, outside)
    os.symlink(outside, sharded / "link.safetensors")
    set_shard(sharded, "link.safetensors")
    msg = load_error(sharded)
    assert "'link.safetensors'" in msg and "resolves outside the checkpoint directory" in msg


@pytest.mark.parametrize("shard", [3, None, "", ["a"], {"f": 1}])
def test_shard_name_that_is_not_a_file_name_is_refused(sharded, shard):
    set_shard(sharded, shard)
    msg = load_error(sharded)
    assert f"the shard {shard!r} of model.norm.weight must be a file name" in msg


def test_a_shard_in_a_subdirectory_still_loads(sharded):
    shard = json.loads((sharded / INDEX).read_text())["weight_map"]["model.norm.weight"]
    (sharded / "sub").mkdir()
    shutil.copy(sharded / shard, sharded / "sub" / shard)
    edit_json(
        sharded / INDEX,
        lambda d: d["weight_map"].update({k: f"sub/{v}" for k, v in d["weight_map"].items() if v == shard}),
    )
    m = from_pretrained(sharded)
    assert torch.equal(m.model.norm.weight, tiny().model.norm.weight)


# ---- checkpoints: weights ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "value, dtype", [(float("nan"), None), (float("inf"), None), (-float("inf"), None), (1e6, "float16")]
)  # fp16 overflow
def test_non_finite_weights_are_refused_naming_the_tensor(single, value, dtype):
    from safetensors.torch import load_file, save_file

    state = load_file(single / "model.safetensors")
    state["model.layers.1.mlp.down_proj.weight"][0, 0] = value
    save_file(state, str(single / "model.safetensors"))
    msg = load_error(single, dtype=dtype)
    assert "model.layers.1.mlp.down_proj.weight" in msg and "non-finite" in msg


def test_all_nan_weights_are_refused(single):
    from safetensors.torch import load_file, save_file

    state = {k: torch.full_like(v, float("nan")) for k, v in load_file(single / "model.safetensors").items()}
    save_file(state, str(single / "model.safetensors"))
    assert "non-finite values" in load_error(single)


# ---- checkpoints: config field types ----------------------------------------------------------


@pytest.mark.parametrize(
    "field, value",
    [
        ("mask_token_id", 60.0),
        ("mask_token_id", "60"),
        ("mask_token_id", True),
        ("mask_token_id", [60]),
        ("rope_parameters", "yarn"),
        ("rope_parameters", ["default"]),
        ("rms_norm_eps", "1e-6"),
        ("rms_norm_eps", 0),
        ("rms_norm_eps", -1e-6),
        ("rope_theta", "1e6"),
        ("rope_theta", -10.0),
        ("vocab_size", 300.0),
        ("hidden_size", "64"),
        ("num_hidden_layers", True),
        ("head_dim", None),
        ("block_size", 8.5),
        ("block_size", "8"),
        ("max_position_embeddings", None),
        ("tie_word_embeddings", "false"),
        ("tie_word_embeddings", 0),
        ("eos_token_id", "x"),
        ("eos_token_id", [1, "2"]),
        ("bos_token_id", 1.0),
        ("initializer_range", "0.02"),
        ("hidden_act", 5),
        ("torch_dtype", 16),
    ],
)
def test_config_field_of_the_wrong_type_is_named(single, field, value):
    edit_json(single / "config.json", lambda d: d.update({field: value}))
    msg = load_error(single)
    assert f"config.json: {field} must be" in msg and repr(value) in msg


def test_rope_theta_inside_rope_parameters_is_checked(single):
    edit_json(single / "config.json", lambda d: d.update(rope_parameters={"rope_type": "default", "rope_theta": "x"}))
    assert "rope_parameters.rope_theta must be a positive finite number" in load_error(single)


@pytest.mark.parametrize(
    "kw, name",
    [
        (dict(block_size=4.0), "block_size"),
        (dict(mask_token_id="5"), "mask_token_id"),
        (dict(block_size=True), "block_size"),
    ],
)
def test_override_arguments_of_the_wrong_type_are_named(single, kw, name):
    assert f"{name}= argument: {name} must be an integer" in load_error(single, **kw)


@pytest.mark.parametrize("index", [{"weight_map": []}, {"weight_map": {}}, {}, []])
def test_index_without_a_weight_map(sharded, index):
    (sharded / INDEX).write_text(json.dumps(index))
    msg = load_error(sharded)
    assert INDEX in msg


# ---- bundled targets: metadata ----------------------------------------------------------------


@pytest.fixture
def target_dir(tmp_path):
    """The default target's files linked into a fresh directory (the metadata copied, to edit)."""
    meta = json.loads((TARGETS_DIR / f"{DEFAULT_TARGET}.json").read_text())
    for f in (meta["weights"]["file"], meta["tokenizer"]["file"]):
        os.symlink(TARGETS_DIR / f, tmp_path / f)
    (tmp_path / f"{DEFAULT_TARGET}.json").write_text(json.dumps(meta))
    return tmp_path, tmp_path / f"{DEFAULT_TARGET}.json"


def target_error(path) -> str:
    with pytest.raises(ValueError) as e:
        spotref.load_target(path)
    return str(e.value)


@pytest.mark.parametrize(
    "text, message",
    [
        ("{}", "has no 'config' field"),
        ("[]", "is not a JSON object"),
        ("null", "is not a JSON object"),
        ("3", "is not a JSON object"),
        ("{not json", "cannot read the target metadata"),
        ("", "cannot read the target metadata"),
    ],
)
def test_metadata_that_is_not_an_object(target_dir, text, message):
    _, meta = target_dir
    meta.write_text(text)
    msg = target_error(str(meta))
    assert message in msg and str(meta) in msg


@pytest.mark.parametrize(
    "field", ["weights", "tokenizer", "config", "weights.file", "weights.bytes", "weights.sha256", "tokenizer.file"]
)
def test_metadata_without_a_field_names_it(target_dir, field):
    _, meta = target_dir
    head, _, key = field.partition(".")
    edit_json(meta, lambda d: d[head].pop(key) if key else d.pop(head))
    assert f"has no {field!r} field" in target_error(meta)


@pytest.mark.parametrize(
    "field, value",
    [("weights", "x"), ("weights.bytes", "1709760"), ("weights.bytes", True), ("tokenizer.file", 3), ("config", [])],
)
def test_metadata_field_of_the_wrong_type(target_dir, field, value):
    _, meta = target_dir
    head, _, key = field.partition(".")
    edit_json(meta, lambda d: d[head].__setitem__(key, value) if key else d.__setitem__(head, value))
    assert f"{field!r} must be a" in target_error(meta)  # "a string", "an integer", ...


def test_config_and_weights_of_different_sizes(target_dir):
    _, meta = target_dir
    edit_json(meta, lambda d: d["config"].update(hidden_size=d["config"]["hidden_size"] * 2))
    msg = target_error(meta)
    assert "do not match the config" in msg and "wrong-shaped tensor(s)" in msg
    c = json.loads((TARGETS_DIR / f"{DEFAULT_TARGET}.json").read_text())["config"]
    V, h = c["vocab_size"], c["hidden_size"]  # the embedding (or head) named first
    assert f".weight ({V}, {h}) (config wants ({V}, {2 * h}))" in msg


@pytest.mark.parametrize("field, value", [("vocab_size", "x"), ("mask_token_id", 1.0), ("rms_norm_eps", "tiny")])
def test_target_config_field_of_the_wrong_type(target_dir, field, value):
    _, meta = target_dir
    edit_json(meta, lambda d: d["config"].update({field: value}))
    msg = target_error(meta)
    assert "config:" in msg and field in msg


def test_load_target_by_path(target_dir):
    d, meta = target_dir
    want = spotref.load_target(DEFAULT_TARGET).model.model.norm.weight
    for name in (meta, str(meta)):
        assert torch.equal(spotref.load_target(name).model.model.norm.weight, want)
    assert torch.equal(spotref.load_target(DEFAULT_TARGET, directory=Path(d)).model.model.norm.weight, want)


@pytest.mark.parametrize(
    "name, message",
    [
        (3, "target name must be a str or a path"),
        (None, "must be a str"),
        (Path("/nope/x.json"), "no target metadata"),
        ("nope", "unknown target 'nope'"),
    ],
)
def test_load_target_bad_names(name, message):
    assert message in target_error(name)


# ---- drafters ----------------------------------------------------------------------------------

SHIPPED = ORDER_DIR / f"{DEFAULT_TARGET}.pt"


def drafter_error(name) -> str:
    with pytest.raises(ValueError) as e:
        spotref.load_drafter(name)
    return str(e.value)


def with_header(tmp_path, **changes) -> Path:
    blob = torch.load(SHIPPED, weights_only=True)
    for k, v in changes.items():
        if k.startswith("config_"):
            blob["header"]["config"][k[7:]] = v
        else:
            blob["header"][k] = v
    path = tmp_path / "d.pt"
    torch.save(blob, path)
    return path


def test_load_drafter_by_path():
    want = spotref.load_drafter(DEFAULT_TARGET).model.config
    assert spotref.load_drafter(SHIPPED).model.config == want
    assert spotref.load_drafter(str(SHIPPED)).model.config == want


@pytest.mark.parametrize("name", [None, 3, "", b"stdlib-b32", ["stdlib-b32"]])
def test_load_drafter_needs_a_name_or_a_path(name):
    assert "load_drafter needs a drafter name" in drafter_error(name)


@pytest.mark.parametrize(
    "changes, message",
    [
        (dict(config="x"), "header field 'config' must be a dict"),
        (dict(config=None), "header field 'config' must be a dict"),
        (dict(config=[1, 2]), "header field 'config' must be a dict"),
        (dict(config_block_size="32"), "'config.block_size' must be a positive int"),
        (dict(config_layers=-1), "'config.layers' must be a positive int"),
        (dict(config_heads=2.0), "'config.heads' must be a positive int"),
        (dict(config_colour=3), "unknown key 'colour'"),
        (dict(format="other"), "not a spotref drafter checkpoint"),
    ],
)
def test_drafter_header_fields_are_named(tmp_path, changes, message):
    path = with_header(tmp_path, **changes)
    msg = drafter_error(path)
    assert message in msg and str(path) in msg


def test_drafter_checkpoint_without_a_block_size(tmp_path):
    blob = torch.load(SHIPPED, weights_only=True)
    del blob["header"]["config"]["block_size"]
    torch.save(blob, tmp_path / "d.pt")
    assert "has no block_size" in drafter_error(tmp_path / "d.pt")


@pytest.mark.parametrize(
    "data, culprit",
    [(b"", "is not a drafter checkpoint: it is empty"), (b"not a checkpoint", "not a file torch.save writes")],
)
def test_empty_or_garbage_drafter_checkpoints(tmp_path, data, culprit):
    path = tmp_path / "d.pt"
    path.write_bytes(data)
    msg = drafter_error(path)
    assert culprit in msg and str(path) in msg and "\n" not in msg


def test_truncated_drafter_checkpoints(tmp_path):
    path = tmp_path / "d.pt"
    path.write_bytes(SHIPPED.read_bytes()[:1000])
    msg = drafter_error(path)
    assert "is corrupt" in msg and str(path) in msg and "\n" not in msg


def test_missing_drafter_checkpoint(tmp_path):
    assert "no drafter checkpoint at" in drafter_error(tmp_path / "none.pt")
    assert "no SPOT drafter named 'nope'" in drafter_error("nope")

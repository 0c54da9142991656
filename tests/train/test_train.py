"""The block-diffusion training objective, the corpus, and a tiny end-to-end training run."""

import argparse
import json
import re
import shutil

import numpy as np
import pytest
import torch
from helpers import tiny_config

from spotref.load.bpe import BPETokenizer
from spotref.spec.sdar import SDARModel
from workbench.bench.corpus import build_corpus, is_heldout, whitespace_share
from workbench.data import gsm
from workbench.data.corpora import CORPORA, open_corpus
from workbench.train.train_curriculum import fresh_problem, row_level
from workbench.train.train_data import batch_at, encode_row, result_positions, rows_batch, token_stream
from workbench.train.train_export import export_run, read_checkpoint
from workbench.train.train_loop import snapshot_due, train, train_bpe
from workbench.train.train_objective import bd3_logits, bd3_loss, bd3_mask, noise_blocks
from workbench.train.train_options import TrainOptions, add_arguments, parse_curriculum

pytest.importorskip("tokenizers")
pytest.importorskip("safetensors")
pytest.importorskip("tqdm")


def tiny_model(B=4, V=40, mask_id=39):
    torch.manual_seed(0)
    return SDARModel(tiny_config(V, B, mask_id, initializer_range=0.2)).eval()


def test_bd3_mask_matches_its_definition():
    L, B = 12, 4
    m = bd3_mask(L, B) == 0
    for i in range(2 * L):
        for j in range(2 * L):
            bi, bj = i % L // B, j % L // B
            if i < L:  # noised query: its own noised block, clean blocks before it
                want = bi == bj if j < L else bj < bi
            else:  # clean query: clean blocks up to its own
                want = j >= L and bj <= bi
            assert m[i, j] == want, f"query {i}, key {j}"


def test_noise_masks_between_1_and_B_per_block():
    x = np.arange(2 * 32).reshape(2, 32) % 7
    x_t, masked = noise_blocks(x, 8, 99, np.random.default_rng(0))
    k = masked.reshape(2, 4, 8).sum(-1)
    assert ((k >= 1) & (k <= 8)).all(), k
    assert (x_t[masked] == 99).all() and (x_t[~masked] == x[~masked]).all()


def test_clean_input_gives_the_decoding_model_logits():
    """x_t = x: noised block i sees itself and clean blocks < i, i.e. block-causal attention."""
    model = tiny_model()
    x = torch.randint(0, 39, (3, 12))
    with torch.no_grad():
        got = bd3_logits(model, x, x, bd3_mask(12, 4))
    torch.testing.assert_close(got, model(x), rtol=1e-4, atol=1e-5)


def test_noised_block_logits_equal_a_decoding_pass():
    """Training sees what decoding sees: block i noised over the clean prefix's cache."""
    model, B = tiny_model(), 4
    x = torch.randint(0, 39, (1, 12))
    x_t, _ = noise_blocks(x.numpy(), B, 39, np.random.default_rng(1))
    x_t = torch.from_numpy(x_t)
    with torch.no_grad():
        train_logits = bd3_logits(model, x_t, x, bd3_mask(12, B))[0]  # (L, V)
    for i in range(3):
        cache = model.prefill(x[0, : i * B])
        dec = model.denoise(cache, x_t[:, i * B : (i + 1) * B])[0]  # (B, V)
        torch.testing.assert_close(train_logits[i * B : (i + 1) * B], dec, rtol=1e-4, atol=1e-5)


def transcribed_bd3_logits(model, x_t, x, mask):
    """The training forward as workbench/train/train_target.py had it before the model owned it
    (``bd3_logits`` over ``layer_forward``): the layers' weights through ``F.linear`` and fused
    attention, RoPE tables computed here. x_t, x: (N, L) -> logits (N, L, V) of x_t."""
    F, cfg = torch.nn.functional, model.config
    (N, L), d = x.shape, cfg.head_dim
    inv_freq = 1.0 / (cfg.rope_theta ** (torch.arange(0, d, 2).float() / d))
    freqs = torch.outer(torch.arange(L).float(), inv_freq)
    emb = torch.cat((freqs, freqs), -1).repeat(2, 1)  # (2L, d): positions twice
    cos, sin = emb.cos(), emb.sin()
    rot = lambda t: t * cos + torch.cat((-t[..., d // 2 :], t[..., : d // 2]), -1) * sin
    h = model.model.embed_tokens(torch.cat((x_t, x), 1))  # (N, 2L, H)
    for layer in model.model.layers:
        a, m, S = layer.self_attn, layer.mlp, 2 * L
        y = layer.input_layernorm(h)
        q = a.q_norm(F.linear(y, a.q_proj.weight).view(N, S, a.h, d)).transpose(1, 2)  # (N, h, 2L, d)
        k = a.k_norm(F.linear(y, a.k_proj.weight).view(N, S, a.kvh, d)).transpose(1, 2)  # (N, kvh, 2L, d)
        v = F.linear(y, a.v_proj.weight).view(N, S, a.kvh, d).transpose(1, 2)
        g = a.h // a.kvh
        k, v = rot(k).repeat_interleave(g, dim=1), v.repeat_interleave(g, dim=1)
        o = F.scaled_dot_product_attention(rot(q), k, v, attn_mask=mask)  # (N, h, 2L, d)
        h = h + F.linear(o.transpose(1, 2).reshape(N, S, a.h * d), a.o_proj.weight)
        y = layer.post_attention_layernorm(h)
        h = h + F.linear(F.silu(F.linear(y, m.gate_proj.weight)) * F.linear(y, m.up_proj.weight), m.down_proj.weight)
    return F.linear(model.model.norm(h[:, :L]), model.lm_head.weight)


@pytest.mark.parametrize("weighting", ["tokens", "elbo"])
def test_the_models_training_forward_gives_the_transcribed_loss_and_gradients(weighting):
    """``bd3_logits`` (the decoder's own layers) against the forward training used
    before it, on a fixed batch: the same BD3 loss (float32: equal to rounding) and gradients."""
    model, B, L = tiny_model(B=4), 4, 16
    model.train()
    x = torch.from_numpy(np.random.default_rng(3).integers(0, 39, (3, L)))
    x_t, masked = (torch.from_numpy(a) for a in noise_blocks(x.numpy(), B, 39, np.random.default_rng(4)))
    losses, grads = [], []
    for forward in (transcribed_bd3_logits, bd3_logits):
        model.zero_grad()
        loss = bd3_loss(forward(model, x_t, x, bd3_mask(L, B)), x, masked, B, weighting)
        loss.backward()
        losses.append(loss.detach())
        grads.append([p.grad.clone() for p in model.parameters()])
    torch.testing.assert_close(losses[1], losses[0], rtol=1e-6, atol=0)
    for new, old in zip(*grads):
        torch.testing.assert_close(new, old, rtol=1e-4, atol=1e-6)


def test_batches_are_a_pure_function_of_seed_and_step():
    stream = np.arange(1000, dtype=np.uint16) % 50
    a, b = batch_at(stream, 7, 0, 4, 16, 8, 60), batch_at(stream, 7, 0, 4, 16, 8, 60)
    c = batch_at(stream, 8, 0, 4, 16, 8, 60)
    assert all(torch.equal(u, v) for u, v in zip(a, b))
    assert not torch.equal(a[1], c[1])


def test_corpus_split_is_by_document_and_reproducible():
    c = build_corpus()
    train, held = {d.name for d in c.train}, {d.name for d in c.heldout}
    assert train and held and not train & held
    assert all(is_heldout(n, 0.05) for n in held)
    assert not any("site-packages" in n or "/test/" in n for n in train | held)
    assert c.describe()["sha256"] == build_corpus().describe()["sha256"]
    assert 0.2 < whitespace_share(c.heldout[0].text) < 0.6


def args_for(tmp_path, *extra):
    return TrainOptions.from_argv(tiny_argv(tmp_path, *extra))


def init_from(run) -> list:
    """``--init`` the run's checkpoint, with the tokenizer it was trained with."""
    return ["--init", str(run / "ckpt.pt"), "--tokenizer", str(run / "tokenizer.json")]


def tiny_argv(tmp_path, *extra) -> list:
    """A tiny run's command line (``python -m workbench train-target``'s options), ``extra`` last."""
    return [
        "--name",
        "tiny",
        "--runs",
        str(tmp_path / "runs"),
        "--corpus-limit",
        "3",
        "--tokenizer",
        "bpe300",
        "--hidden",
        "32",
        "--intermediate",
        "64",
        "--layers",
        "1",
        "--heads",
        "2",
        "--kv-heads",
        "1",
        "--head-dim",
        "16",
        "--seq-len",
        "32",
        "--block-size",
        "8",
        "--batch",
        "2",
        "--eval-every",
        "10",
        "--ckpt-every",
        "5",
        "--no-progress",
        *extra,
    ]


def test_options_are_built_once_and_record_what_the_command_line_gave():
    """``TrainOptions``: frozen, built once from the parsed namespace; ``record`` (what a run saves)
    is the namespace's entries in its order, the ``spotref`` command's ``command`` and ``argv``
    included; ``from_record`` rebuilds the options, with the defaults of options a run lacks."""
    p = argparse.ArgumentParser()
    add_arguments(p)
    parsed = p.parse_args(["--name", "x", "--mix-blocks", "16,32", "--curriculum", "0@0,1@40"])
    ns = argparse.Namespace(command="train-target", **vars(parsed), argv=["--name", "x"])
    options = TrainOptions.from_namespace(ns)
    assert options.mix_blocks == [16, 32] and options.extra == {"command": "train-target", "argv": ["--name", "x"]}
    assert list(options.record().items()) == list(vars(ns).items())
    with pytest.raises(AttributeError):
        options.seq_len = 1
    old = {k: v for k, v in options.record().items() if k not in ("drill_from", "suffix_results")}
    rebuilt = TrainOptions.from_record(old)
    assert rebuilt.drill_from is None and rebuilt.suffix_results == 0.0
    assert rebuilt.record() == options.record()


@pytest.fixture(scope="module")
def tiny_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("train")
    state = train(args_for(tmp, "--steps", "20", "--export", str(tmp / "targets")))
    return tmp, state


@pytest.mark.slow
def test_tiny_training_exports_a_loadable_target(tiny_run):
    from spotref.load.targets import list_targets, load_target

    tmp, state = tiny_run
    assert state["step"] == 20 and state["history"][-1]["heldout_loss"] < state["history"][0]["heldout_loss"] + 1
    assert list_targets(tmp / "targets") == ["tiny"]
    target = load_target("tiny", directory=tmp / "targets")
    assert target.model.config.block_size == 8 and target.meta["training"]["steps"] == 20
    program = target.meta["training"]["commands"][0]["command"].split()[0]
    assert "/" not in program  # as invoked, without this machine's path to the program
    assert target.tokenizer.decode(target.tokenizer.encode("def f(x):")) == "def f(x):"


@pytest.mark.slow
def test_an_export_killed_before_its_metadata_is_refused_by_name_not_paired(tiny_run, tmp_path):
    """export() writes the weights, the tokenizer, then the metadata holding both SHA-256: a kill
    before the metadata leaves new files beside the old metadata, which load_target refuses."""
    import hashlib
    import shutil

    from spotref.load.targets import load_target

    tmp, _ = tiny_run
    d = shutil.copytree(tmp / "targets", tmp_path / "t")
    meta = load_target("tiny", directory=d).meta
    assert meta["tokenizer"]["sha256"] == hashlib.sha256((d / "tiny.tokenizer.json").read_bytes()).hexdigest()
    tok = d / "tiny.tokenizer.json"
    tok.write_text(tok.read_text().replace('"', '"', 1) + "\n")  # another tokenizer file landed
    with pytest.raises(ValueError, match="tiny.tokenizer.json does not match the metadata's SHA-256"):
        load_target("tiny", directory=d)
    shutil.copy(tmp / "targets" / "tiny.tokenizer.json", tok)
    weights = d / "tiny.safetensors"
    raw = bytearray(weights.read_bytes())
    raw[-1] ^= 1  # other weights landed
    weights.write_bytes(bytes(raw))
    with pytest.raises(ValueError, match="SHA-256 does not match the metadata"):
        load_target("tiny", directory=d)


@pytest.mark.slow
def test_an_initialised_run_exports_its_whole_lineage(tiny_run, tmp_path):
    """``--init``: the export names what the weights started from (checkpoint, step, commands),
    also for a run whose checkpoint predates the record (read from the init file at export)."""
    from spotref.load.targets import load_target

    tmp, state = tiny_run
    src = tmp / "runs" / "tiny"
    tuned = train(
        args_for(
            tmp_path,
            "--name",
            "tuned",
            "--steps",
            "3",
            *init_from(src),
            "--export",
            str(tmp_path / "targets"),
        )
    )
    init = load_target("tuned", directory=tmp_path / "targets").meta["training"]["init"]
    assert init["checkpoint"] == str(src / "ckpt.pt") and init["step"] == state["step"] == 20
    assert init["commands"] == state["commands"] and tuned["step"] == 3
    ck_path = tmp_path / "runs" / "tuned" / "ckpt.pt"
    ck = read_checkpoint(ck_path)
    del ck["state"]["init"]  # as a run from before the record
    torch.save(ck, ck_path)
    export_run(tmp_path / "runs" / "tuned", tmp_path / "again", "tuned", block_size=8)
    assert load_target("tuned", directory=tmp_path / "again").meta["training"]["init"] == init


@pytest.mark.slow
def test_average_run_is_the_mean_of_its_inputs_and_names_them(tiny_run, tmp_path):
    """``average_run``: the weights are the mean of the run's and the others' (a run checkpoint or
    a target); the export and a run initialised from it name every input; another tokenizer is
    refused as ``--init`` refuses it."""
    from spotref.load.targets import load_target
    from workbench.train.train_export import average_run

    tmp, state = tiny_run
    src = tmp / "runs" / "tiny"
    tuned = train(
        args_for(
            tmp_path,
            "--name",
            "tuned",
            "--steps",
            "3",
            *init_from(src),
        )
    )
    run = tmp_path / "runs" / "tuned"
    out = average_run(run, [str(src / "ckpt.pt"), str(tmp / "targets" / "tiny.json")], tmp_path / "avg")
    with pytest.raises(ValueError, match="already holds a run checkpoint"):  # another run's: kept
        average_run(run, [str(src / "ckpt.pt")], src)
    a, b = (read_checkpoint(p) for p in (run / "ckpt.pt", src / "ckpt.pt"))
    shipped = load_target(tmp / "targets" / "tiny.json").model.state_dict()
    got = read_checkpoint(out)
    for k, v in got["model"].items():
        want = (a["model"][k].float() + b["model"][k].float() + shipped[k].float()) / 3
        assert torch.allclose(v.float(), want, atol=1e-6) and not torch.equal(v, a["model"][k])
    record = got["state"]["average"]
    assert [r["checkpoint"] for r in record] == [
        str(run / "ckpt.pt"),
        str(src / "ckpt.pt"),
        str(tmp / "targets" / "tiny.json"),
    ]
    assert record[0]["commands"] == tuned["commands"] and record[2]["sha256"]
    export_run(tmp_path / "avg", tmp_path / "targets", "avg", block_size=8)
    assert load_target("avg", directory=tmp_path / "targets").meta["training"]["average"] == record
    assert "opt" not in got  # not the run's optimizer moments
    for init in (str(out), str(tmp_path / "targets" / "avg.json")):  # from the checkpoint or the target
        again = train(
            args_for(
                tmp_path, "--name", "again", "--steps", "1", "--init", init, "--tokenizer", str(src / "tokenizer.json")
            )
        )
        assert again["init"]["average"] == record
        shutil.rmtree(tmp_path / "runs" / "again")
    other = train(args_for(tmp_path, "--name", "other", "--steps", "1", "--tokenizer", "bpe290"))
    snap = tmp_path / "runs" / "other" / "snapshots"  # a snapshot: its run's tokenizer
    snap.mkdir(exist_ok=True)
    shutil.copy(tmp_path / "runs" / "other" / "ckpt.pt", snap / "step-0000001.pt")
    for bad in (tmp_path / "runs" / "other" / "ckpt.pt", snap / "step-0000001.pt"):
        with pytest.raises(ValueError, match="another tokenizer"):
            average_run(run, [str(bad)], tmp_path / "bad")
    assert not (tmp_path / "bad" / "ckpt.pt").exists() and other["step"] == 1
    with pytest.raises(ValueError, match="the run's own directory"):
        average_run(run, [str(src / "ckpt.pt")], run)


@pytest.mark.slow
def test_a_run_can_start_from_a_target(tiny_run, tmp_path):
    """``--init NAME.json``: the target's weights (float16, as it loads them), its lineage with
    their SHA-256; another tokenizer or another model shape is refused, naming the option."""
    from spotref.load.targets import load_target
    from workbench.train.train_export import start_from
    from workbench.train.train_loop import make_config

    tmp, state = tiny_run
    src, meta_path = tmp / "runs" / "tiny", tmp / "targets" / "tiny.json"
    target = load_target(meta_path)
    args = args_for(tmp_path, "--tokenizer", str(src / "tokenizer.json"))
    model = SDARModel(make_config(args, target.tokenizer))
    record = start_from(model, str(meta_path), target.tokenizer)
    assert all(torch.equal(a, b) for a, b in zip(model.state_dict().values(), target.model.state_dict().values()))
    assert record["sha256"] == target.meta["weights"]["sha256"] and record["step"] == state["step"]
    assert record["commands"] == state["commands"] and record["checkpoint"] == str(meta_path)
    tuned = train(
        args_for(
            tmp_path,
            "--name",
            "tuned",
            "--steps",
            "2",
            "--init",
            str(meta_path),
            "--tokenizer",
            str(src / "tokenizer.json"),
        )
    )
    assert tuned["init"] == record and tuned["step"] == 2
    with pytest.raises(ValueError, match="another tokenizer"):
        train(
            args_for(tmp_path, "--name", "other-tok", "--steps", "1", "--init", str(meta_path), "--tokenizer", "bpe290")
        )
    with pytest.raises(ValueError, match="do not fit this run's model"):
        train(
            args_for(
                tmp_path,
                "--name",
                "wider",
                "--steps",
                "1",
                *init_from(src),
                "--hidden",
                "48",
            )
        )


@pytest.mark.slow
def test_a_run_can_deepen_the_weights_it_starts_from(tiny_run, tmp_path):
    """``--init-deepen``: a 1-layer run's weights start a 3-layer model that computes exactly what
    they did (the added layers are the identity); not deeper, or no ``--init``: refused."""
    from spotref.load.targets import load_target
    from workbench.train.train_export import start_from
    from workbench.train.train_loop import make_config

    tmp, _ = tiny_run
    src, meta_path = tmp / "runs" / "tiny", tmp / "targets" / "tiny.json"
    target = load_target(meta_path)
    deep = SDARModel(
        make_config(args_for(tmp_path, "--tokenizer", str(src / "tokenizer.json"), "--layers", "3"), target.tokenizer)
    )
    record = start_from(deep, str(meta_path), target.tokenizer, deepen=True)
    assert record["deepened_from_layers"] == 1 and deep.config.num_hidden_layers == 3
    x = torch.randint(2, 300, (2, 16))
    with torch.no_grad():
        assert torch.equal(deep(x), target.model(x)), "the deepened model computes something else"
        assert deep.model.layers[2].mlp.up_proj.weight.abs().sum() > 0  # fresh, not zero: it can learn
    tuned = train(
        args_for(
            tmp_path,
            "--name",
            "deep",
            "--steps",
            "2",
            "--init",
            str(meta_path),
            "--init-deepen",
            "--layers",
            "2",
            "--tokenizer",
            str(src / "tokenizer.json"),
        )
    )
    assert tuned["init"]["deepened_from_layers"] == 1 and tuned["config"]["num_hidden_layers"] == 2
    with pytest.raises(ValueError, match="deepening needs more layers"):
        start_from(SDARModel(target.model.config), str(meta_path), target.tokenizer, deepen=True)
    with pytest.raises(ValueError, match="it needs --init"):
        train(args_for(tmp_path, "--name", "no-init", "--steps", "1", "--init-deepen"))


@pytest.mark.slow
def test_resuming_gives_the_same_weights(tiny_run, tmp_path):
    """10 steps, stop, 10 more (same command) == 20 steps straight."""
    _, state = tiny_run
    train(args_for(tmp_path, "--steps", "20", "--until", "10"))
    resumed = train(args_for(tmp_path, "--steps", "20"))
    straight = tiny_run[0] / "runs" / "tiny" / "ckpt.pt"
    a = read_checkpoint(straight)["model"]
    b = read_checkpoint(tmp_path / "runs" / "tiny" / "ckpt.pt")["model"]
    assert resumed["step"] == 20
    assert all(torch.equal(a[k], b[k]) for k in a), "resumed weights differ"


# --- corpora, padding, digits, snapshots (issue 11) -------------------------------------------


class Chars:
    """A tokenizer of single characters (EOS 0, MASK 1), enough for token_stream."""

    eos_id, mask_id = 0, 1

    def encode(self, text):
        return [2 + ord(c) % 50 for c in text]


def test_pad_eot_puts_every_document_at_a_block_start():
    docs = ["abc", "abcdefg", "abcdefgh", "x" * 20]
    plain, padded = token_stream(docs, Chars()), token_stream(docs, Chars(), block=8)
    assert len(plain) == sum(len(d) + 1 for d in docs)  # one EOS each, as before
    assert len(padded) % 8 == 0 and len(padded) == 8 + 8 + 16 + 24
    starts, pos = [], 0
    for d in docs:
        starts.append(pos)
        n = len(d)
        assert list(padded[pos : pos + n]) == Chars().encode(d)
        end = pos + n + 1 + (-(n + 1)) % 8
        assert (padded[pos + n : end] == 0).all() and end - pos - n >= 1  # end-of-text to the block end
        pos = end
    assert all(s % 8 == 0 for s in starts)


def test_aligned_batches_start_at_block_boundaries():
    stream = np.arange(4000, dtype=np.uint16)  # stream[i] = i
    assert torch.equal(batch_at(stream, 3, 0, 4, 16, 8, 4001)[1], batch_at(stream, 3, 0, 4, 16, 8, 4001, 1)[1])
    starts = np.concatenate(
        [batch_at(stream, step, 0, 4, 32, 8, 4001, align=16)[1][:, 0].numpy() for step in range(20)]
    )
    assert (starts % 16 == 0).all() and starts.max() <= 4000 - 32 and len(set(starts)) > 40


def test_split_digits_writes_numbers_digit_by_digit():
    texts = ["Mia has 1234 apples and 56 pears, 1234 + 56 = 1290."] * 50
    tok = train_bpe(texts, 300, split_digits=True)
    assert tok.split_digits and not train_bpe(texts, 300).split_digits
    ids = tok.encode("x 90817 = 42")
    digits = [tok.decode([i]) for i in ids if tok.decode([i]).strip().isdigit()]
    assert digits == list("9081742")
    assert tok.decode(ids) == "x 90817 = 42"
    assert BPETokenizer.from_json(tok.to_json()).split_digits


def test_snapshots_are_due_every_interval_of_training_time():
    assert not snapshot_due({"train_s": 59.0}, 1) and snapshot_due({"train_s": 60.0}, 1)
    assert not snapshot_due({"train_s": 100.0, "snapshot_s": 61.0}, 1)
    assert snapshot_due({"train_s": 121.0, "snapshot_s": 61.0}, 1)


GSM_RUN = (
    "--corpus",
    "gsm",
    "--corpus-seed",
    "5",
    "--corpus-size",
    "200",
    "--corpus-level",
    "1",
    "--pad-eot",
    "--split-digits",
    "--mix-blocks",
    "4,8",
    "--keep-snapshots",
    "0.00001",
)


@pytest.fixture(scope="module")
def gsm_run(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gsm")
    state = train(args_for(tmp, "--steps", "6", *GSM_RUN, "--export", str(tmp / "targets")))
    return tmp, state


@pytest.mark.slow
def test_a_gsm_run_records_its_corpus_and_tokenizer(gsm_run):
    from spotref.load.targets import load_target

    tmp, _ = gsm_run
    target = load_target("tiny", directory=tmp / "targets")
    corpus, tok = target.meta["corpus"], target.meta["tokenizer"]
    assert corpus["name"] == "gsm" and corpus["seed"] == 5 and corpus["version"] == gsm.VERSION
    assert corpus["options"] == {"size": 200, "level": 1} and corpus["difficulty"] == vars(gsm.LEVELS[1])
    assert tok["split_digits"] is True and target.meta["training"]["pad_eot"] is True
    # the corpus is reproducible from the metadata alone
    rebuilt = open_corpus(corpus, CORPORA)
    assert rebuilt.documents("train") == gsm.documents(200, 5, gsm.LEVELS[1])
    assert rebuilt.heldout(3, 0) == gsm.heldout(3, 0, gsm.LEVELS[1])
    assert [target.tokenizer.decode([i]) for i in target.tokenizer.encode("307")] == ["3", "0", "7"]


def test_drill_share_mixes_drills_into_fresh_problems():
    d = gsm.LEVELS[0]
    plain = [fresh_problem(5, 7, j, d).question for j in range(40)]
    assert plain == [fresh_problem(5, 7, j, d, 0.0).question for j in range(40)]  # 0: unchanged
    mixed = [fresh_problem(5, 7, j, d, 0.5) for j in range(40)]
    drills = [p for p in mixed if p.template == "drill"]
    assert 8 <= len(drills) <= 32 and all(not gsm.is_heldout(p.question) for p in mixed)
    assert [p.question for p in mixed if p.template != "drill"] == [
        q for q, p in zip(plain, mixed) if p.template != "drill"
    ]
    assert all(p.template == "drill" for p in (fresh_problem(5, 7, j, d, 1.0) for j in range(10)))
    assert [fresh_problem(5, 7, j, d, 0.5, "+-+-*/").question for j in range(40)] == [p.question for p in mixed]
    ops = [gsm.equations(fresh_problem(5, 7, j, d, 1.0, "-/").solution)[0][1] for j in range(60)]
    assert set(ops) == {"-", "/"}
    with pytest.raises(ValueError, match="drill operators must be"):
        gsm.drill(np.random.default_rng(0), gsm.LEVELS[0], "+^")
    from_problems = [fresh_problem(5, 7, j, gsm.LEVELS[3], 1.0, "+", "problems") for j in range(40)]
    assert all(p.template == "drill" and not gsm.is_heldout(p.question) for p in from_problems)
    assert sum(max(a, b) >= 100 for a, _, b, _, _ in (gsm.equations(p.solution)[0] for p in from_problems)) >= 5
    assert [fresh_problem(5, 7, j, d, 0.5, "+-+-*/", "range").question for j in range(40)] == [
        p.question for p in mixed
    ]


@pytest.mark.slow
def test_the_math_quality_report(gsm_run, capsys):
    """A gsm target gets the math report: answers by steps, equations, stability without fill."""
    from workbench import cli
    from workbench.bench import quality_math

    tmp, _ = gsm_run
    status = cli.main(
        ["quality", "tiny", "--targets-dir", str(tmp / "targets"), "--prompts", "3", "--new-tokens", "16"]
    )
    r = json.loads(capsys.readouterr().out)
    assert status == (0 if r["meets_bar"] else 1) and r["problems"] == 3
    assert sum(n for _, n in r["answers_by_steps"].values()) == 3 and 0 <= r["answers"] <= 1
    assert 0 <= r["stability_d0_text"] <= 1 and r["stability_d0_commits"] >= r["stability_d0_text_commits"]
    assert r["meets_bar"] == all(r[k] >= v for k, v in quality_math.BAR.items())
    kinds = r["equations_by_kind"]
    assert r["equations_wrong_length"] is None or 0 <= r["equations_wrong_length"] <= 1
    assert sum(n for _, n in kinds.values()) == round(r["equations_per_problem"] * 3)
    if kinds:
        assert abs(sum(s * n for s, n in kinds.values()) / sum(n for _, n in kinds.values()) - r["equations"]) < 1e-3
    from spotref.load.targets import load_target

    code = load_target("stdlib-b32")
    with pytest.raises(ValueError, match="not a math target"):
        quality_math.problems_of(code, 2)


def test_a_wrong_result_is_told_apart_by_its_length():
    from workbench.bench.quality_math import wrong_length

    assert wrong_length(38, "-", 34, 14) and wrong_length(33, "+", 46, 179) and wrong_length(60, "/", 5, 1)
    assert not wrong_length(80, "-", 54, 36) and not wrong_length(39, "*", 12, 418)
    assert not wrong_length(7, "/", 2, 3)  # no integer result: wrong, but not by length


def test_equations_are_told_apart_by_operator_and_size():
    from workbench.bench.quality_math import equation_kind

    assert equation_kind(16, "+", 64, 80) == "+ 1-2 digits"
    assert equation_kind(136, "*", 7, 952) == "* 3+ digits"
    assert equation_kind(8, "*", 12, 96) == "* 1-2 digits" and equation_kind(99, "+", 1, 100) == "+ 3+ digits"


@pytest.mark.slow
def test_snapshots_are_kept_and_exportable(gsm_run, tmp_path):
    from spotref.load.targets import load_target

    tmp, state = gsm_run
    kept = sorted((tmp / "runs" / "tiny" / "snapshots").glob("step-*.pt"))
    assert kept and [s["file"] for s in state["snapshots"]] == [f"snapshots/{p.name}" for p in kept]
    first = read_checkpoint(kept[0])
    assert set(first) == {"model", "state"} and first["state"]["step"] == state["snapshots"][0]["step"]
    export_run(tmp / "runs" / "tiny", tmp_path, "early", block_size=4, checkpoint=kept[0])
    early = load_target("early", directory=tmp_path)
    assert early.meta["training"]["steps"] == first["state"]["step"] and early.model.block_size == 4
    assert early.meta["corpus"]["name"] == "gsm"


@pytest.mark.slow
def test_a_resumed_run_keeps_its_data_options(gsm_run):
    tmp, _ = gsm_run
    changed = [("--corpus-seed", "6"), ("--corpus-size", "201")]
    for option, value in changed:
        extra = list(GSM_RUN)
        extra[extra.index(option) + 1] = value
        with pytest.raises(ValueError, match=option if option == "--corpus-seed" else "corpus options"):
            train(args_for(tmp, "--steps", "7", *extra))
    no_pad = [a for a in GSM_RUN if a != "--pad-eot"]
    with pytest.raises(ValueError, match="--pad-eot"):
        train(args_for(tmp, "--steps", "7", *no_pad))
    from workbench.train.train_export import recipe
    from workbench.train.train_loop import data_options

    record = {"name": "gsm", "seed": 5}
    assert data_options(record, {})["--drill-from"] == "range" == recipe({})["drill_from"]  # runs before it
    assert data_options(record, {"drill_from": "problems"})["--drill-from"] == "problems"


@pytest.mark.parametrize("fmt", ["lines", "jsonl"])
def test_a_file_corpus_trains_and_gives_held_out_prompts(tmp_path, fmt):
    from spotref.load.targets import load_target

    texts = [f"<|im_start|>user\nadd {i} and {i + 1}<|im_end|>\n<|im_start|>assistant\n{2 * i + 1}" for i in range(600)]
    path = tmp_path / f"docs.{fmt}"
    path.write_text("\n".join(t.replace("\n", " ") if fmt == "lines" else json.dumps({"text": t}) for t in texts))
    args = args_for(tmp_path, "--steps", "3", "--corpus", str(path), "--export", str(tmp_path / "targets"))
    train(args)
    target = load_target("tiny", directory=tmp_path / "targets")
    assert target.meta["corpus"]["name"] == "file" and target.meta["corpus"]["format"] == fmt
    with pytest.raises(ValueError, match="corpus \\('file'\\) are not shipped.*--targets-dir"):
        target.heldout(4, seed=0)  # the installed package ships the bundled targets' sets alone
    from workbench.data import heldout as heldout_tool

    targets = str(tmp_path / "targets")  # the workbench writes the directory's sets beside its targets
    assert heldout_tool.main(["--targets-dir", targets, "--out", targets, "--n", "8"]) == 0
    drawn = open_corpus(target.meta["corpus"])
    assert target.heldout(8, seed=0) == drawn.heldout(8, 0) and target.heldout(3, 1, "test") == drawn.heldout(
        3, 1, "test"
    )
    corpus = open_corpus(target.meta["corpus"])  # the workbench draws this target's prompts
    prompts = corpus.heldout(4, seed=1)
    assert prompts == corpus.heldout(4, seed=1) and all(a is None for _, a in prompts)
    assert all(any(d.startswith(p) for d in corpus.documents("heldout")) for p, _ in prompts)
    assert not any(d.startswith(p) for p, _ in prompts for d in corpus.documents("train"))
    if fmt == "jsonl":  # a chat document: up to the assistant header
        assert all(p.endswith("<|im_start|>assistant\n") for p, _ in prompts)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--corpus", "nonesuch"], "--corpus: must be stdlib, gsm or a text file"),
        (["--corpus-level", "9"], "--corpus-level: invalid choice"),
        (["--keep-snapshots", "0"], "--keep-snapshots: must be in (0.0, inf], got 0.0"),
        (["--corpus-seed", "-1"], "--corpus-seed: must be an int in [0, 2**64 - 1], got -1"),
        (["--drill-ops", "add,pow"], "--drill-ops: must be a comma-separated list of add, sub, mul, div"),
        (["--drill-ops", "+"], "--drill-ops: must be a comma-separated list of add, sub, mul, div"),
    ],
)
def test_bad_options_are_argparse_errors_naming_them(argv, message, capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--name", "x", *argv])
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--corpus-seed", "3"], "--corpus-seed applies to --corpus gsm only"),
        (["--corpus", "gsm", "--no-english"], "--no-english applies to --corpus stdlib only"),
        (["--tokenizer", "bytes", "--split-digits"], "--split-digits trains the BPE"),
        (["--result-weight", "2"], "--result-weight weights the results of one-document rows"),
        (["--drill-ops", "sub,div"], "--drill-ops sets the operators of the drills: it needs --drill-share"),
        (["--drill-from", "problems"], "--drill-from sets where the drills' numbers come from: it needs --drill-share"),
    ],
)
def test_misplaced_options_are_value_errors_naming_them(tmp_path, extra, message):
    args = args_for(tmp_path, "--steps", "1", *extra)
    with pytest.raises(ValueError, match=message):
        train(args)


@pytest.mark.parametrize(
    "content, message",
    [
        ("", "holds no document"),
        ('{"text": "a"}\n{"txt": "b"}\n', "line 2: want an object"),
        ('{"text": "a"}\nnot json\n', "line 2: not JSON"),
        ("only one short line\n", "want at least one of each"),
    ],
)
def test_bad_corpus_files_are_named(tmp_path, content, message):
    path = tmp_path / "bad.txt"
    path.write_text(content)
    with pytest.raises(ValueError, match=f"--corpus .*{message}"):
        train(args_for(tmp_path, "--steps", "1", "--corpus", str(path)))


def test_the_command_line_names_a_misplaced_option(tmp_path, capsys):
    from workbench.cli import main

    code = main(["train-target", "--name", "t", "--runs", str(tmp_path), "--corpus-size", "10"])
    assert code == 2
    assert (
        "python -m workbench train-target: error: --corpus-size applies to --corpus gsm only" in capsys.readouterr().err
    )


# --- the gsm recipe: rows per document, answer-only masks, fresh problems, curriculum -----------


def test_level_0_is_easier_than_level_1_and_the_others_are_unchanged():
    assert gsm.LEVELS[0] == gsm.Difficulty(1, 1, max_operand=12, max_factor=5, max_result=60)
    assert gsm.LEVELS[1] == gsm.Difficulty(1, 2, max_operand=20, max_factor=6, max_result=100)
    assert gsm.LEVELS[3] == gsm.Difficulty(1, 4, max_operand=100, max_factor=12, max_result=1000)
    for p in gsm.problems(200, seed=3, difficulty=gsm.LEVELS[0]):
        ((a, _, b, c, right),) = gsm.equations(p.solution)  # one step, right
        assert right and c == p.answer <= 60 and min(a, b) <= 12


def test_a_row_is_one_document_at_position_0_padded_to_its_block_end():
    tok = Chars()
    doc = gsm.chat_document("q1", "a = 2")
    ids, start, end = encode_row(doc, tok, 8, False, 256)
    n = len(doc)
    assert ids[:n] == tok.encode(doc) and start == 0 and end == n + 1
    assert len(ids) % 8 == 0 and set(ids[n:]) == {tok.eos_id} and len(ids) - n <= 8
    ids2, start2, end2 = encode_row(doc, tok, 8, True, 256)  # answer-only: same ids, masks later
    assert ids2 == ids and start2 == doc.index("assistant\n") + len("assistant\n") and end2 == end
    assert encode_row(doc, tok, 8, False, 16)[0] == ids[:16]  # cut at --seq-len


def test_answer_only_masks_k_of_the_n_answer_positions_and_weights_the_padding():
    tok = Chars()
    rows = [encode_row(gsm.chat_document("q" * i, "a" * (3 * i)), tok, 8, True, 256) for i in range(1, 5)]
    for seed in range(20):
        x_t, x, masked, w = rows_batch(rows, 8, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3)
        for i, (ids, start, end) in enumerate(rows):
            assert not masked[i, :start].any() and not masked[i, len(ids) :].any()
            for b in range(0, len(ids), 8):
                n = max(0, min(b + 8, len(ids)) - max(b, start))
                k = int(masked[i, b : b + 8].sum())
                assert (1 <= k <= n) if n else k == 0
            m = masked[i].numpy()
            assert np.allclose(w[i].numpy()[m], np.where(np.arange(x.shape[1]) >= end, 0.3, 1.0)[m])
        assert (w[~masked] == 0).all() and (x_t[masked] == tok.mask_id).all() and (x_t[~masked] == x[~masked]).all()


def test_fresh_problems_are_a_function_of_seed_and_step_and_never_held_out():
    d = gsm.LEVELS[1]
    a = [fresh_problem(0, step, j, d) for step in range(3) for j in range(8)]
    assert a == [fresh_problem(0, step, j, d) for step in range(3) for j in range(8)]
    assert len({p.question for p in a}) > 20 and not any(gsm.is_heldout(p.question) for p in a)
    assert fresh_problem(1, 0, 0, d) != a[0]


def test_the_curriculum_moves_up_by_step_and_mixes_in_lower_levels():
    args = TrainOptions.from_argv(["--name", "x", "--curriculum", "0@0,1@40,2@120"])
    assert parse_curriculum(args.curriculum) == [(0, 0), (40, 1), (120, 2)]
    assert {row_level(args, s, j) for s in range(40) for j in range(8)} == {0}
    late = [row_level(args, s, j) for s in range(120, 220) for j in range(8)]
    assert set(late) == {0, 1, 2} and 0.3 < np.mean(np.array(late) < 2) < 0.5  # 40% lower levels
    assert [row_level(args, 130, j) for j in range(8)] == [row_level(args, 130, j) for j in range(8)]


RECIPE = (
    "--corpus",
    "gsm",
    "--corpus-size",
    "100",
    "--corpus-level",
    "1",
    "--split-digits",
    "--mix-blocks",
    "4,8",
    "--rows-per-doc",
    "--answer-only",
    "--eot-weight",
    "0.3",
    "--fresh-problems",
    "--curriculum",
    "0@0,1@2",
    "--rope-theta",
    "10000",
    "--mask-results",
    "0.5",
    "--suffix-results",
    "0.5",
)


@pytest.mark.slow
def test_a_recipe_run_records_its_options_and_resumes_exactly(tmp_path):
    from spotref.load.targets import load_target

    straight = train(
        args_for(tmp_path / "a", "--steps", "4", "--seq-len", "256", *RECIPE, "--export", str(tmp_path / "targets"))
    )
    train(args_for(tmp_path / "b", "--steps", "4", "--seq-len", "256", "--until", "2", *RECIPE))
    resumed = train(args_for(tmp_path / "b", "--steps", "4", "--seq-len", "256", *RECIPE))
    a = read_checkpoint(tmp_path / "a" / "runs" / "tiny" / "ckpt.pt")["model"]
    b = read_checkpoint(tmp_path / "b" / "runs" / "tiny" / "ckpt.pt")["model"]
    assert straight["step"] == resumed["step"] == 4 and all(torch.equal(a[k], b[k]) for k in a)
    target = load_target("tiny", directory=tmp_path / "targets")
    recipe = target.meta["training"]["recipe"]
    assert recipe["rows_per_doc"] and recipe["answer_only"] and recipe["eot_weight"] == 0.3
    assert recipe["fresh_problems"] and recipe["curriculum"] == [[0, 0], [2, 1]]
    assert recipe["curriculum_lower"] == 0.4 and recipe["levels"]["0"] == vars(gsm.LEVELS[0])
    assert target.model.config.rope_theta == 10000 and recipe["rope_theta"] == 10000
    assert recipe["mask_results"] == 0.5 == recipe["suffix_results"] and np.isfinite(target.meta["heldout_loss"])
    with pytest.raises(ValueError, match="--eot-weight"):
        train(
            args_for(tmp_path / "b", "--steps", "5", "--seq-len", "256", *[v if v != "0.3" else "0.5" for v in RECIPE])
        )


@pytest.mark.slow
def test_rows_per_doc_trains_on_a_fixed_corpus_too(tmp_path):
    state = train(args_for(tmp_path, "--steps", "2", "--rows-per-doc", "--eval-every", "2"))
    assert state["step"] == 2 and np.isfinite(state["history"][-1]["heldout_loss"])


@pytest.mark.slow
def test_the_default_recipe_is_empty(tiny_run):
    from spotref.load.targets import load_target

    target = load_target("tiny", directory=tiny_run[0] / "targets")
    recipe = target.meta["training"]["recipe"]
    assert not recipe["rows_per_doc"] and not recipe["fresh_problems"] and recipe["curriculum"] is None
    assert target.model.config.rope_theta == 10_000.0  # SDARConfig's default, transformers' Qwen3Config's


@pytest.mark.parametrize(
    "extra, message",
    [
        (["--answer-only"], "--answer-only applies to --rows-per-doc only"),
        (["--eot-weight", "0.3"], "--eot-weight applies to --rows-per-doc only"),
        (["--rows-per-doc", "--fresh-problems"], "--fresh-problems applies to --corpus gsm only"),
        (["--rows-per-doc", "--corpus", "gsm", "--curriculum", "0@0"], "--curriculum draws its problems afresh"),
        (["--curriculum-lower", "0.5"], "--curriculum-lower applies to --curriculum or --adaptive only"),
        (["--rows-per-doc", "--corpus", "gsm", "--adaptive", "0,1"], "--adaptive draws its problems afresh"),
        (
            ["--rows-per-doc", "--corpus", "gsm", "--fresh-problems", "--adaptive", "0,1", "--curriculum", "0@0"],
            "give one of them",
        ),
        (["--rows-per-doc", "--weighting", "elbo"], "--rows-per-doc weights the loss per token"),
        (["--mask-results", "0.5"], "--mask-results masks the results of one-document rows"),
        (["--suffix-results", "0.5"], "--suffix-results masks the blocks of one-document rows"),
        pytest.param(  # loads the gsm corpus and reads its held-out rows before refusing
            ["--rows-per-doc", "--corpus", "gsm", "--answer-only", "--seq-len", "32"],
            "--seq-len 32 cuts the held-out rows",
            marks=pytest.mark.slow,
        ),
    ],
)
def test_misplaced_recipe_options_are_value_errors_naming_them(tmp_path, extra, message):
    with pytest.raises(ValueError, match=message):
        train(args_for(tmp_path, "--steps", "1", *extra))


@pytest.mark.parametrize("value", ["0@0,1", "0@5", "0@0,9@3", "0@0,1@0", "x"])
def test_bad_curricula_are_argparse_errors(value, capsys):
    p = argparse.ArgumentParser()
    add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(["--name", "x", "--curriculum", value])
    assert "--curriculum: must" in capsys.readouterr().err


@pytest.mark.slow
def test_the_adaptive_curriculum_moves_on_evaluation_and_resumes_exactly(tmp_path):
    from spotref.load.targets import load_target

    adaptive = [v for v in RECIPE if v not in ("--curriculum", "0@0,1@2")] + [
        "--adaptive",
        "0,1,2",
        "--adapt-every",
        "2",
        "--adapt-n",
        "2",
        "--adapt-answers",
        "0",
        "--adapt-equations",
        "0",
        "--seq-len",
        "256",
    ]
    straight = train(args_for(tmp_path / "a", "--steps", "4", *adaptive, "--export", str(tmp_path / "targets")))
    train(args_for(tmp_path / "b", "--steps", "4", "--until", "2", *adaptive))
    resumed = train(args_for(tmp_path / "b", "--steps", "4", *adaptive))
    assert [e["moved_to"] for e in straight["adaptive_evals"]] == [1, 2] and straight["level"] == 2
    assert resumed["adaptive_evals"] == straight["adaptive_evals"]
    a = read_checkpoint(tmp_path / "a" / "runs" / "tiny" / "ckpt.pt")["model"]
    b = read_checkpoint(tmp_path / "b" / "runs" / "tiny" / "ckpt.pt")["model"]
    assert all(torch.equal(a[k], b[k]) for k in a)
    meta = load_target("tiny", directory=tmp_path / "targets").meta["training"]
    assert meta["recipe"]["adaptive"]["levels"] == [0, 1, 2] and meta["adaptive_evals"] == straight["adaptive_evals"]
    args = TrainOptions.from_argv(["--name", "x", "--adaptive", "0,1,2"])
    assert {row_level(args, 9, j, 0) for j in range(50)} == {0}
    assert {row_level(args, 9, j, 2) for j in range(50)} == {0, 1, 2}


def test_result_weight_weights_the_results_and_the_tokens_after_them():
    """--result-weight: the results and the 2 tokens after each weigh W in the loss; the masks
    drawn are the same as without it."""
    from spotref.load.targets import load_target
    from workbench.train.train_data import boosted_results

    tok = load_target("gsm-b32").tokenizer
    p = gsm.drill(np.random.default_rng(9))
    ids, start, end = row = encode_row(p.document, tok, 8, True, 512)
    pos = result_positions(ids, tok, follow=2)
    digits = result_positions(ids, tok)
    assert set(digits) < set(pos) and len(pos) == len(digits) + 4  # two results, 2 tokens after each
    after = [j for j in pos if j not in set(digits)]
    assert "".join(tok.decode([ids[j]]) for j in after).startswith("\n####")  # the line break and '####' follow
    rows = [row, encode_row(gsm.draw(np.random.default_rng(3)).document, tok, 8, True, 512)]
    assert boosted_results(rows, tok, 1.0) is None
    boost = boosted_results(rows, tok, 3.0)
    for seed in range(3):
        plain = rows_batch(rows, 8, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3)
        got = rows_batch(rows, 8, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3, None, boost, 3.0)
        assert all(torch.equal(a, b) for a, b in zip(plain[:3], got[:3]))
        for i, b in enumerate(boost):
            ratio = np.ones(plain[3].shape[1], np.float32)
            ratio[b] = 3.0
            assert torch.equal(got[3][i], plain[3][i] * torch.from_numpy(ratio))


def test_suffix_results_mask_each_chosen_block_from_a_result_to_its_end():
    """--suffix-results: in a chosen row, each block that holds a result's first digit is masked
    from one such digit to the block end and nothing before it (the question and the solution so
    far given, as when the decoder places the result's length); other blocks and rows keep the
    draw, and share 0 draws nothing."""
    from spotref.load.targets import load_target
    from workbench.train.train_data import suffix_cuts

    tok = load_target("gsm-b32").tokenizer
    rows = [
        encode_row(gsm.draw(np.random.default_rng(s), gsm.LEVELS[3]).document, tok, 32, True, 256) for s in range(8)
    ]
    assert suffix_cuts(rows, tok, 0.0, 16, np.random.default_rng(0)) is None
    for B in (16, 32):
        for seed in range(3):
            cuts = suffix_cuts(rows, tok, 0.5, B, np.random.default_rng(seed))
            assert any(c is None for c in cuts) and any(c is not None for c in cuts)
            plain = rows_batch(rows, B, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3)
            x_t, x, masked, w = rows_batch(
                rows, B, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3, None, None, 1.0, cuts
            )
            for i, (ids, start, _) in enumerate(rows):
                pos = result_positions(ids, tok)
                firsts = {int(j) for j in pos if j - 1 not in set(pos.tolist())}
                if cuts[i] is None:
                    assert torch.equal(masked[i], plain[2][i])
                    continue
                assert {c // B for c in cuts[i]} == {c // B for c in firsts} and set(cuts[i]) <= firsts
                assert len(cuts[i]) == len({c // B for c in cuts[i]})  # one per block
                for b in range(len(ids) // B):
                    got, drawn = masked[i, b * B : (b + 1) * B], plain[2][i, b * B : (b + 1) * B]
                    cut = [c for c in cuts[i] if c // B == b]
                    if not cut:
                        assert torch.equal(got, drawn)
                    else:
                        want = torch.arange(b * B, (b + 1) * B) >= cut[0]
                        assert torch.equal(got, want)
            assert (x_t[masked] == tok.mask_id).all() and (w[~masked] == 0).all()


def test_mask_and_suffix_results_share_each_rows_result_positions(monkeypatch):
    """--mask-results and --suffix-results read a row's result positions from one ``row_results``:
    each row is parsed once however many options pick it, and the draws are those made without
    it; ``result_starts`` is each result's first digit."""
    from spotref.load.targets import load_target
    from workbench.train import train_data

    tok = load_target("gsm-b32").tokenizer
    rows = [
        encode_row(gsm.draw(np.random.default_rng(s), gsm.LEVELS[3]).document, tok, 32, True, 256) for s in range(8)
    ]
    for ids, _, _ in rows:
        pos = result_positions(ids, tok)
        assert train_data.result_starts(ids, tok).tolist() == [
            j for j in pos.tolist() if j - 1 not in set(pos.tolist())
        ]
    alone = (
        train_data.forced_results(rows, tok, 0.8, np.random.default_rng(1)),
        train_data.suffix_cuts(rows, tok, 0.5, 16, np.random.default_rng(2)),
    )
    calls = []
    parse = train_data.result_positions
    monkeypatch.setattr(
        train_data, "result_positions", lambda ids, tok, follow=0: calls.append(1) or parse(ids, tok, follow)
    )
    positions = train_data.row_results(rows, tok)
    shared = (
        train_data.forced_results(rows, tok, 0.8, np.random.default_rng(1), positions),
        train_data.suffix_cuts(rows, tok, 0.5, 16, np.random.default_rng(2), positions),
    )
    for a, b in zip(alone, shared):
        assert [None if x is None else x.tolist() for x in a] == [None if x is None else x.tolist() for x in b]
    picked = {i for i in range(len(rows)) if shared[0][i] is not None or shared[1][i] is not None}
    both = {i for i in picked if shared[0][i] is not None and shared[1][i] is not None}
    assert both and len(calls) == len(picked)  # once per row, not per option


def test_mask_results_masks_every_written_result_of_the_chosen_rows():
    """--mask-results: the digits after '= ' and '#### ' (the equations' results, the final
    answer) are masked on top of the k ~ U{1..n} draw, which stays the draw without them."""
    from spotref.load.targets import load_target

    tok = load_target("gsm-b32").tokenizer  # digits are single tokens
    problems = [gsm.draw(np.random.default_rng(s)) for s in range(6)] + [gsm.drill(np.random.default_rng(9))]
    rows = [encode_row(p.document, tok, 8, True, 512) for p in problems]
    for p, (ids, start, _) in zip(problems, rows):
        pos = result_positions(ids, tok)
        results = re.findall(r"(?:= |#### )(\d+)", p.solution)
        assert "".join(tok.decode([ids[j]]) for j in pos) == "".join(results) and (pos >= start).all()
    forced = [result_positions(ids, tok) if i % 2 else None for i, (ids, _, _) in enumerate(rows)]
    for seed in range(5):
        plain = rows_batch(rows, 8, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3)
        x_t, x, masked, w = rows_batch(rows, 8, tok.mask_id, tok.eos_id, np.random.default_rng(seed), 0.3, forced)
        for i, pos in enumerate(forced):
            if pos is None:
                assert torch.equal(masked[i], plain[2][i])
            else:
                assert masked[i, pos].all() and (masked[i] >= plain[2][i]).all()
                extra = masked[i] & ~plain[2][i]
                assert set(np.flatnonzero(extra.numpy())) <= set(pos.tolist())
        assert (x_t[masked] == tok.mask_id).all() and (w[~masked] == 0).all()


class Payload:
    """What a hostile checkpoint could hold: unpickling it calls ``os.mkdir(marker)`` (any code
    could stand there)."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        import os

        return os.mkdir, (self.marker,)


@pytest.fixture
def hostile(tiny_run, tmp_path):
    """A run directory whose checkpoint is a real one with a ``Payload`` in its state; the marker
    it would create; a check that an unrestricted ``torch.load`` would indeed run it."""
    tmp, _ = tiny_run
    run, marker = shutil.copytree(tmp / "runs" / "tiny", tmp_path / "runs" / "tiny"), tmp_path / "ran"
    ck = torch.load(run / "ckpt.pt", weights_only=True)
    torch.save({**ck, "state": {**ck["state"], "note": Payload(marker)}}, run / "ckpt.pt")
    torch.load(run / "ckpt.pt", weights_only=False)  # what reading it with pickle would do: it runs the payload
    assert marker.is_dir(), "the crafted checkpoint is not hostile: the test would prove nothing"
    marker.rmdir()
    return run, marker


@pytest.mark.slow
def test_a_checkpoint_that_would_run_code_is_refused_and_runs_none(hostile, tmp_path, capsys):
    """Every path that reads a run checkpoint (--init, a resume, export_run, average_run) loads
    tensors and plain data only: the hostile file is refused by name and its code never runs."""
    from workbench.cli import main
    from workbench.train.train_export import average_run

    run, marker = hostile
    refused = "refused, not loaded: it holds objects other than tensors and plain data"
    argv = ["train-target", *tiny_argv(tmp_path, "--name", "other", *init_from(run))]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert refused in err and "Traceback" not in err
    for read in (
        lambda: train(args_for(tmp_path, "--steps", "21")),  # resumes runs/tiny/ckpt.pt
        lambda: export_run(run, tmp_path / "out", "t"),
        lambda: average_run(run, [], tmp_path / "avg"),
    ):
        with pytest.raises(ValueError, match=refused):
            read()
    assert not marker.exists(), "reading the checkpoint ran its code"

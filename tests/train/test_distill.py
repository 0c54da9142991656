"""``train-target --distill TEACHER``: a block-causal teacher distilled into a canvas student's
decoding-state rows (``teacher_logits``, ``distill_kl``, ``distill_term``, ``load_teacher``)."""

import math

import numpy as np
import pytest
import torch

from spotref.configs import SDARConfig
from spotref.spec.sdar import SDARModel
from workbench.checkpoint_writer import save_pretrained
from workbench.train.train_canvas import distill_term
from workbench.train.train_export import load_teacher, read_checkpoint
from workbench.train.train_loop import train
from workbench.train.train_objective import decode_noise, distill_kl, teacher_end, teacher_logits
from workbench.train.train_options import TrainOptions, check_recipe

pytest.importorskip("tokenizers")
pytest.importorskip("tqdm")


def tiny_sdar(vocab: int, mask_id: int, block: int, seed: int = 0) -> SDARModel:
    """A random block-causal model, eval mode."""
    torch.manual_seed(seed)
    cfg = SDARConfig(
        vocab_size=vocab, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=2,
        num_key_value_heads=1, head_dim=16, mask_token_id=mask_id, block_size=block, eos_token_id=0,
        max_position_embeddings=512,
    )  # fmt: skip
    return SDARModel(cfg).eval()


def decode_rows(L: int = 24, B: int = 6):
    """Three rows in decoding states (blocks of B from prompts of 3, 5, 6: none aligned to 4)."""
    x = np.random.default_rng(0).integers(2, 50, size=(3, L))
    x_t, masked, _, _ = decode_noise(
        x, np.array([3, 5, 6]), np.array([15, 12, 10]), B, 1, np.random.default_rng(1), [None, 4, None]
    )
    return tuple(torch.from_numpy(a) for a in (x_t, x, masked))


def test_the_teacher_logits_are_its_decoding_passes_on_the_rows_states():
    """At every masked position: prefill the clean blocks before its teacher block, then denoise
    that block as x_t shows it (the decoder's own calls), the same logits."""
    teacher = tiny_sdar(50, 1, 4)
    x_t, x, masked = decode_rows()
    end = teacher_end(masked, 4)
    got = teacher_logits(teacher, x_t, x, end)
    assert end % 4 == 0 and end <= 24 and got.shape == (3, end, 50) and got.dtype == torch.float32
    checked = 0
    for i in range(3):
        for j in masked[i].nonzero().flatten().tolist():
            b = j // 4
            want = teacher.denoise(teacher.prefill(x[i, : 4 * b]), x_t[i, 4 * b : 4 * b + 4][None])[0, j - 4 * b]
            torch.testing.assert_close(got[i, j], want, atol=1e-5, rtol=1e-5)
            checked += 1
    assert checked == int(masked.sum()) > 3
    # a block that straddles two teacher blocks: the later one sees the earlier one clean, not as x_t
    straddling = [i for i in range(3) if len({j // 4 for j in masked[i].nonzero().flatten().tolist()}) > 1]
    assert straddling, "the rows must exercise a student block over two teacher blocks"
    naive = teacher(x_t[:, :end])  # one block-causal pass over x_t: the later block sees masks before it
    i = straddling[0]
    later = [j for j in masked[i].nonzero().flatten().tolist() if j // 4 > masked[i].nonzero().min() // 4]
    assert not torch.allclose(naive[i, later], got[i, later], atol=1e-3)


def test_teacher_end_covers_every_masked_position_in_whole_teacher_blocks():
    masked = torch.zeros(2, 24, dtype=torch.bool)
    masked[0, 9], masked[1, 13] = True, True
    assert teacher_end(masked, 4) == 16 and teacher_end(masked, 8) == 16 and teacher_end(masked[:1], 4) == 12
    assert teacher_end(torch.zeros(1, 8, dtype=torch.bool), 4) == 0
    with pytest.raises(ValueError, match="multiple of the teacher's block size"):
        teacher_logits(tiny_sdar(50, 1, 4), torch.zeros(1, 8, dtype=torch.long), torch.zeros(1, 8, dtype=torch.long), 6)


def test_the_kl_is_zero_where_the_student_is_the_teacher_and_its_gradient_too():
    teacher = torch.randn(2, 6, 11)
    masked = torch.zeros(2, 6, dtype=torch.bool)
    masked[0, 2:4], masked[1, 5] = True, True
    student = teacher.clone().requires_grad_(True)
    kl = distill_kl(student, teacher, masked)
    assert kl.shape == (2,) and kl.abs().max() < 1e-6
    kl.sum().backward()
    assert student.grad.abs().max() < 1e-6
    # Dream: the prediction of position i is the student's logit at i - 1
    dream = torch.cat([teacher[:, 1:], teacher[:, :1]], 1)  # dream[:, i - 1] = teacher[:, i]
    assert distill_kl(dream, teacher, masked, shift=1).abs().max() < 1e-6
    assert distill_kl(teacher, teacher, masked, shift=1).min() > 1e-3  # unshifted, it is not the teacher


def test_the_kl_of_a_hand_case_is_the_mean_over_a_rows_masked_positions():
    """Teacher (1/2, 1/2), student (3/4, 1/4): KL = 1/2 ln(2/3) + 1/2 ln 2, at one of two positions."""
    teacher = torch.zeros(2, 2, 2)
    student = torch.tensor([[[math.log(3), 0.0], [5.0, -5.0]], [[0.0, 0.0], [0.0, 0.0]]])
    masked = torch.tensor([[True, False], [False, False]])
    kl = distill_kl(student, teacher, masked)
    assert kl[0].item() == pytest.approx(0.5 * math.log(2 / 3) + 0.5 * math.log(2), rel=1e-5)
    assert kl[1].item() == 0.0  # a row with no masked position
    masked[0, 1] = True  # the second position's KL joins the mean
    both = distill_kl(student, teacher, masked)[0].item()
    second = 0.5 * math.log(0.5 / torch.sigmoid(torch.tensor(10.0)).item()) + 0.5 * math.log(
        0.5 / torch.sigmoid(torch.tensor(-10.0)).item()
    )
    assert both == pytest.approx((kl[0].item() + second) / 2, rel=1e-5)
    with pytest.raises(ValueError, match="past the teacher's 1 positions"):
        distill_kl(student, teacher[:, :1], masked)


def test_the_distill_term_averages_the_chosen_rows_over_the_batch():
    teacher = tiny_sdar(50, 1, 4)
    x_t, x, masked = decode_rows()
    student = torch.randn(3, 24, 50)
    rows = np.array([True, False, True])
    end = teacher_end(masked[[0, 2]], 4)
    want = distill_kl(student[[0, 2]], teacher_logits(teacher, x_t[[0, 2]], x[[0, 2]], end), masked[[0, 2]])
    got = distill_term(student, teacher, (x_t, x, masked), rows, 0)
    assert got.item() == pytest.approx(want.sum().item() / 3, rel=1e-6)
    assert distill_term(student, teacher, (x_t, x, masked), np.zeros(3, bool), 0).item() == 0.0


# --- runs ---------------------------------------------------------------------------------------


def run_argv(tmp_path, family, tokenizer, *extra) -> list:
    return [
        "--name", "distil", "--runs", str(tmp_path / "runs"), "--family", family,
        "--corpus", "gsm", "--corpus-size", "40", "--corpus-level", "0", "--tokenizer", str(tokenizer),
        "--rows-per-doc", "--answer-only", "--seq-len", "192", "--block-size", "32",
        "--hidden", "32", "--intermediate", "64", "--layers", "1", "--heads", "2", "--kv-heads", "1",
        "--head-dim", "16", "--batch", "4", "--lr", "3e-3", "--warmup", "2", "--no-progress",
        "--decode-states", "0.7", "--suffix-results", "0.5", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def teacher_dir(tmp_path_factory):
    """A tokenizer (a run's trained BPE) and a tiny block-causal teacher of its vocabulary and MASK, saved."""
    from spotref.load.bpe import tokenizer_from_json

    root = tmp_path_factory.mktemp("teacher")
    train(TrainOptions.from_argv(run_argv(root, "llada", "bpe300", "--steps", "1", "--ckpt-every", "1")))
    tok_file = root / "runs" / "distil" / "tokenizer.json"
    tok = tokenizer_from_json(tok_file.read_text())
    save_pretrained(tiny_sdar(tok.vocab_size, tok.mask_id, 16, seed=3), root / "teacher")
    return tok_file, root / "teacher", tok


def weights(path):
    return read_checkpoint(path / "runs" / "distil" / "ckpt.pt")["model"]


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llada", "dream"])
def test_a_distilled_run_resumes_exactly_and_its_weight_matters(tmp_path, teacher_dir, family):
    """2 steps, stop, 2 more == 4 straight with --distill; --distill-weight 0 trains as no --distill
    (the teacher changes nothing), weight 1 trains otherwise."""
    tok_file, teacher, _ = teacher_dir
    argv = lambda *more: run_argv(tmp_path / more[0], family, tok_file, "--steps", "4", "--ckpt-every", "2", *more[1:])
    distil = ("--distill", str(teacher))
    straight = train(TrainOptions.from_argv(argv("a", *distil)))
    train(TrainOptions.from_argv(argv("b", *distil, "--until", "2")))
    resumed = train(TrainOptions.from_argv(argv("b", *distil)))
    a, b = weights(tmp_path / "a"), weights(tmp_path / "b")
    assert straight["step"] == resumed["step"] == 4 and all(torch.equal(a[k], b[k]) for k in a)
    train(TrainOptions.from_argv(argv("plain")))
    train(TrainOptions.from_argv(argv("zero", *distil, "--distill-weight", "0")))
    plain, zero = weights(tmp_path / "plain"), weights(tmp_path / "zero")
    assert all(torch.equal(plain[k], zero[k]) for k in plain)
    assert not all(torch.equal(plain[k], a[k]) for k in plain)
    with pytest.raises(ValueError, match="--distill: the run distil was trained with"):
        train(TrainOptions.from_argv(argv("b", "--steps", "6")))


@pytest.mark.slow
def test_load_teacher_gives_an_eval_float32_frozen_model(teacher_dir):
    tok_file, teacher, tok = teacher_dir
    model = load_teacher(str(teacher), tok, TrainOptions.from_argv(run_argv(teacher.parent, "llada", tok_file)))
    assert isinstance(model, SDARModel) and not model.training
    assert all(p.dtype == torch.float32 and not p.requires_grad for p in model.parameters())


@pytest.mark.parametrize(
    "extra, message",
    [
        (("--family", "sdar", "--distill", "gsm-b32"), "--distill applies to --family llada / dream only"),
        (("--decode-states", "0", "--suffix-results", "0", "--distill", "gsm-b32"), "it needs --decode-states"),
        (("--distill-weight", "2"), "--distill-weight weights the --distill term: it needs --distill"),
    ],
)
def test_options_distillation_cannot_train_with_are_named(tmp_path, extra, message):
    argv = run_argv(tmp_path, "llada", "bytes", *extra)
    if "sdar" in extra:  # SDAR has no --decode-states
        argv = argv[: argv.index("--decode-states")] + list(extra)
    with pytest.raises(ValueError, match=message):
        check_recipe(TrainOptions.from_argv(argv))


def test_a_negative_weight_is_refused_by_the_parser_and_by_the_options(tmp_path):
    with pytest.raises(SystemExit):
        TrainOptions.from_argv(run_argv(tmp_path, "llada", "bytes", "--distill", "gsm-b32", "--distill-weight", "-1"))
    values = TrainOptions.from_argv(run_argv(tmp_path, "llada", "bytes", "--distill", "gsm-b32")).record()
    for bad in (-1.0, float("nan")):
        with pytest.raises(ValueError, match="--distill-weight must be a finite number >= 0"):
            check_recipe(TrainOptions.from_values({**values, "distill_weight": bad}))


@pytest.mark.slow
def test_teachers_that_do_not_fit_are_named(tmp_path, teacher_dir):
    from spotref.load.targets import load_target

    tok_file, _, tok = teacher_dir
    options = TrainOptions.from_argv(run_argv(tmp_path, "llada", tok_file))
    gsm_tok = load_target("gsm-b32").tokenizer
    with pytest.raises(ValueError, match="--distill gsm-llada is a llada model: the teacher must be block-causal"):
        load_teacher("gsm-llada", gsm_tok, options)
    with pytest.raises(ValueError, match="--distill nope: unknown target"):
        load_teacher("nope", gsm_tok, options)
    with pytest.raises(ValueError, match=r"--distill gsm-b32: its vocabulary \(1024\) and MASK id \(1\) must be"):
        load_teacher("gsm-b32", tok, options)
    for name, model in (
        ("vocab", tiny_sdar(tok.vocab_size + 1, tok.mask_id, 16)),
        ("mask", tiny_sdar(tok.vocab_size, tok.mask_id + 1, 16)),
        ("block", tiny_sdar(tok.vocab_size, tok.mask_id, 128)),
    ):
        save_pretrained(model, tmp_path / name)
        message = "must be a multiple of its block size 128" if name == "block" else "its vocabulary"
        with pytest.raises(ValueError, match=f"--distill {tmp_path / name}.*{message}"):
            load_teacher(str(tmp_path / name), tok, options)

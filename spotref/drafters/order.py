"""The SPOT order model: which masked position does the target commit next? (docs/spec.md section 6)

Input per block position (``N_FEATURES`` numbers, no token ids, so the model is
vocabulary-agnostic by construction):

* the top-32 probabilities of the stale distribution, sorted (the distribution the decision rule
  takes confidences from, ``DecisionRule.probs``: ``softmax(L / T)``, top-k / top-p applied when
  set; MASK excluded);
* structure (``STRUCT``): masked or not; committed in this draft (and at which depth / B);
  step / B; the stale probability of the coupled-noise token at the node's step (the confidence
  the target would see if its logits had not changed), also as its log / ``LOG_SCALE``; the
  temperature as T / (1 + T) (the order behaves differently when sampling);
* position (``POSITION`` numbers): j / B, and sin / cos at ``N_FREQ`` frequencies (2 pi f j / B),
  so attention can tell neighbours apart without a learned, block-size-bound position table;
* certainty (``CERTAINTY``): -log(1 - p_coupled) / ``LOG_SCALE``. Near certainty the
  probabilities above all read 1: which of several positions at 0.9999.. the target commits first
  shows only in 1 - p (on the gsm target the stale-confidence order predicts 0.647 of the next
  commits from float32 confidences and 0.539 from float16 ones).

* freshness (``FRESH``): the positions committed since the stale pass, which the stale
  distributions did not see: the last round's bonus decision (``View.unseen``, marked 1) and
  the draft's own commits; for every position 1 / (distance to the nearest of them on its left)
  and on its right (0: none). A commit moves its neighbours' distributions most, and neither the
  bonus decision nor that neighbourhood shows in the stale distributions (on the gsm target
  39% of the stale order's misses are the bonus decision's neighbour).

* ties (``TIES``): whether p_coupled is tied with the largest p_coupled of the node's masked
  positions, and whether the position is the first (lowest) of those tied. The rule decides in
  the target's precision (``spotref.spec.rules``): in bf16 most confidences of a confident target are
  exactly 1, the decision a tie, and ties go to the lowest position; these two say what decides
  it (on gsm-b32 at T = 0 the stale order so ranked predicts 0.87 of the next commits).

In all ``TOP_K + len(STRUCT) + POSITION + len(CERTAINTY) + len(FRESH) + len(TIES)`` = 32 + 7 + 9
+ 1 + 3 + 2 = 54 numbers. Features are append-only: a model reads the first ``n_features`` of
them (stored in a checkpoint's header as ``config.feature_width``), so checkpoints trained on the
first 48 (before the certainty feature), 49 (before freshness) or 52 (before ties) load and draft
as they did.

A 3-layer bidirectional transformer encoder (d_model 128, 8 heads, pre-norm, FFN 512) over the
B positions gives two numbers per position: the next-commit score (non-masked positions get
-inf, so a softmax over the scores is the distribution of the next commit position) and a
token logit (will the coupled stale token be the target's token when this position is
committed?). A linear skip from the features to the two outputs starts the score at
log(p_coupled) - log(1 - p_coupled) (the log-odds; log(p_coupled) for a model without the
certainty feature), plus 1 for the first of the tied: an untrained model ranks by stale
confidence, ties to the lowest position, the training-free order, and learns corrections to it.
0.62M parameters at these sizes.

SPOT-Sets (the threshold rule, docs/spec.md section 2) reads the same encoder through a set head: for a
threshold ``tau`` it gives, per masked position, the logit of "this position's confidence will
exceed tau" (the rule commits every such position, else the single most confident: the
next-commit head's distribution, ``spotref.drafters.sets``). The head is a small MLP over the
encoder's output, ``log(p_coupled / tau) / LOG_SCALE`` and ``tau`` (``tau`` is an input, so one
model serves every threshold), added to ``s * log(p_coupled / tau)`` with a learned scale ``s``
(``SET_SCALE`` at first): untrained, it is the stale set ``{c > tau}``, the training-free set, and
it learns corrections to it.
Checkpoints without a set head (``set_hidden`` absent from the config) still load; their
drafter drafts the confidence sets under the threshold rule.
"""

from __future__ import annotations

import math

import torch
from torch import nn

TOP_K = 32  # stale probabilities per position
N_FREQ = 4  # sin/cos position frequencies
STRUCT = (
    "masked",
    "in_draft",
    "draft_depth / B",
    "step / B",
    "p_coupled",
    "log(p_coupled) / LOG_SCALE",
    "T / (1 + T)",
)  # the structure features, in order
POSITION = 1 + 2 * N_FREQ  # j / B, sin, cos
CERTAINTY = ("-log(1 - p_coupled) / LOG_SCALE",)  # resolves confidences near 1
FRESH = ("unseen", "1 / left distance to fresh", "1 / right distance to fresh")  # fresh: committed
# since the stale pass (unseen or drafted)
TIES = ("tied with the top p_coupled", "first of the tied")  # what breaks a tie in the rule's precision
CERTAIN = TOP_K + len(STRUCT) + POSITION  # the certainty feature's index
FIRST_TIED = CERTAIN + len(CERTAINTY) + len(FRESH) + 1  # the "first of the tied" feature's index
N_FEATURES = FIRST_TIED + 1  # top, structure, position, certainty, freshness, ties: 54
FEATURE_COUNTS = (CERTAIN, CERTAIN + len(CERTAINTY), FIRST_TIED - 1, N_FEATURES)  # checkpoints read:
# before certainty / freshness / ties, all
LOG_SCALE = 5.0  # the feature log(max(p_coupled, 1e-9)) / 5 lies in [-4.15, 0]
LOG_PC = TOP_K + STRUCT.index("log(p_coupled) / LOG_SCALE")  # its index in the features
SET_INPUTS = ("log(p_coupled / tau) / LOG_SCALE", "tau")  # what the set head adds to the encoder's output
SET_SCALE = 4.0  # untrained exceed logit 4 log(p_coupled / tau): the stale set {c > tau} (a learned scale)
SET_HIDDEN = 64  # the set head's hidden size


class OrderModel(nn.Module):
    """features (N, B, F), masked (N, B) bool -> (scores (N, B), -inf where not masked; token logits (N, B)).

    ``sets(x, masked, tau)``: the set head's exceed logits (N, B) (-inf where not masked), the
    next-commit scores and the token logits. ``set_hidden=None``: no set head (the checkpoints
    shipped before SPOT-Sets)."""

    def __init__(
        self,
        block_size: int,
        d_model: int = 128,
        layers: int = 3,
        heads: int = 8,
        ff: int = 512,
        n_features: int = N_FEATURES,
        top_k: int = TOP_K,
        set_hidden: int | None = SET_HIDDEN,
    ):
        super().__init__()
        self.config = dict(
            block_size=block_size,
            d_model=d_model,
            layers=layers,
            heads=heads,
            ff=ff,
            feature_width=n_features,  # the header's name for it (shipped checkpoints keep it)
            top_k=top_k,
        )
        if set_hidden:
            self.config["set_hidden"] = set_hidden
        self.embed = nn.Sequential(nn.Linear(n_features, d_model), nn.GELU(), nn.Linear(d_model, d_model))
        layer = nn.TransformerEncoderLayer(
            d_model, heads, ff, dropout=0.0, activation="gelu", batch_first=True, norm_first=True
        )
        self.encoder = nn.TransformerEncoder(layer, layers, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(d_model)
        self.head = nn.Linear(d_model, 2)
        self.skip = nn.Linear(n_features, 2, bias=False)  # starts at log(p_coupled)
        with torch.no_grad():  # untrained: the confidence order
            self.skip.weight.zero_()
            self.skip.weight[0, LOG_PC] = LOG_SCALE
            if n_features > CERTAIN:
                self.skip.weight[0, CERTAIN] = LOG_SCALE
            if n_features > FIRST_TIED:
                self.skip.weight[0, FIRST_TIED] = 1.0
            self.head.weight.zero_()
            self.head.bias.zero_()
        self.set_head = None
        if set_hidden:
            self.set_head = nn.Sequential(
                nn.Linear(d_model + len(SET_INPUTS), set_hidden), nn.GELU(), nn.Linear(set_hidden, 1)
            )
            self.set_scale = nn.Parameter(torch.tensor(math.log(SET_SCALE)))  # log of the skip's scale
            with torch.no_grad():  # untrained: the stale set
                self.set_head[2].weight.zero_()
                self.set_head[2].bias.zero_()

    @classmethod
    def from_config(cls, config: dict, **changes) -> "OrderModel":
        """An untrained model of a header's ``config`` (its keys as stored: ``feature_width`` is
        ``n_features``; no ``set_hidden``: no set head), with the arguments in ``changes`` replaced."""
        cfg = {"set_hidden": None, **config}
        cfg["n_features"] = cfg.pop("feature_width", N_FEATURES)
        return cls(**{**cfg, **changes})

    @property
    def block_size(self) -> int:
        return self.config["block_size"]

    @property
    def n_features(self) -> int:
        """The features per position this model reads (the first ``n_features`` of ``features``)."""
        return self.config["feature_width"]

    @property
    def has_sets(self) -> bool:
        return self.set_head is not None

    def take(self, x: torch.Tensor) -> torch.Tensor:
        """(N, B, F >= n_features) features -> the first n_features, what this model reads."""
        F = self.n_features
        assert x.ndim == 3 and x.shape[-1] >= F, f"features {tuple(x.shape)}, want (N, B, >= {F})"
        return x[..., :F]

    def encode(self, x: torch.Tensor) -> torch.Tensor:
        """(N, B, F) features -> (N, B, d) normalised encoder output."""
        return self.norm(self.encoder(self.embed(self.take(x))))

    def forward(self, x: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
        out = self.head(self.encode(x)) + self.skip(self.take(x))  # (N, B, 2)
        return out[..., 0].masked_fill(~masked, -torch.inf), out[..., 1]

    def sets(self, x: torch.Tensor, masked: torch.Tensor, tau: torch.Tensor):
        """Under thresholds tau (N,): (exceed-set logits (N, B), -inf where not masked;
        next-commit scores (N, B); token logits (N, B)), from one encoder pass."""
        if not self.has_sets:
            raise ValueError(
                "this order model has no set head (a checkpoint from before SPOT-Sets): "
                "spotref train-drafter NAME --sets-only adds one"
            )
        h = self.encode(x)  # (N, B, d)
        N, B, _ = h.shape
        rel = x[..., LOG_PC] * LOG_SCALE - tau.float().log()[:, None]  # (N, B) log(p_coupled / tau)
        inp = torch.cat([h, (rel / LOG_SCALE)[..., None], tau.float()[:, None, None].expand(N, B, 1)], -1)
        s = self.set_scale.exp() * rel + self.set_head(inp)[..., 0]
        out = self.head(h) + self.skip(self.take(x))  # (N, B, 2)
        return s.masked_fill(~masked, -torch.inf), out[..., 0].masked_fill(~masked, -torch.inf), out[..., 1]


def with_set_head(model: OrderModel, set_hidden: int = SET_HIDDEN) -> OrderModel:
    """``model`` itself when it has a set head, else a copy with an untrained one (the rest kept)."""
    if model.has_sets:
        return model
    new = OrderModel.from_config(model.config, set_hidden=set_hidden)
    missing, unexpected = new.load_state_dict(model.state_dict(), strict=False)
    assert not unexpected and all(k.startswith("set_") for k in missing), (missing, unexpected)
    return new.eval()


def without_set_head(model: OrderModel) -> OrderModel:
    """A copy of ``model`` without its set head (the order model alone), or ``model`` itself."""
    if not model.has_sets:
        return model
    new = OrderModel.from_config(model.config, set_hidden=None)
    new.load_state_dict({k: v for k, v in model.state_dict().items() if not k.startswith("set_")})
    return new.eval()


def widened(model: OrderModel, n_features: int = N_FEATURES) -> OrderModel:
    """``model`` reading the first ``n_features`` features (features are append-only): the added
    features' input weights start at zero, so it scores exactly as before until trained."""
    F = model.n_features
    if F == n_features:
        return model
    if F > n_features:
        raise ValueError(f"an order model reading {F} features cannot be narrowed to {n_features}")
    new = OrderModel.from_config(model.config, n_features=n_features)
    sd = model.state_dict()
    for k in ("embed.0.weight", "skip.weight"):  # (out, F) -> (out, n_features)
        sd[k] = torch.nn.functional.pad(sd[k], (0, n_features - F))
    new.load_state_dict(sd)
    return new.eval()


def temperature_key(T: float) -> str:
    """Checkpoint headers keep one entry per regime: "0" for T = 0 (argmax), "1" for T > 0."""
    return "1" if T > 0 else "0"


def n_params(model: nn.Module) -> int:
    return sum(p.numel() for p in model.parameters())


def top_probs(probs: torch.Tensor, k: int = TOP_K) -> torch.Tensor:
    """probs: (B, V) -> (B, k) the k largest, descending (zero-padded when V < k)."""
    top = probs.topk(min(k, probs.shape[-1]), -1).values  # (B, min(k, V))
    return torch.nn.functional.pad(top, (0, k - top.shape[-1]))


def position_features(B: int) -> torch.Tensor:
    """(B, POSITION): j / B, then sin, cos of 2 pi f j / B for f = 1 .. N_FREQ."""
    j = torch.arange(B, dtype=torch.float32)
    ang = 2 * math.pi * j[:, None] * torch.arange(1, N_FREQ + 1)[None] / B  # (B, N_FREQ)
    return torch.cat([(j / B)[:, None], ang.sin(), ang.cos()], -1)


def fresh_distances(fresh: torch.Tensor) -> torch.Tensor:
    """fresh: (N, B) bool -> (N, B, 2): 1 / the distance from each position j to the nearest
    fresh position strictly left of j, and strictly right of j (0 where there is none)."""
    N, B = fresh.shape
    j = torch.arange(B).expand(N, B)
    left = torch.where(fresh, j, -1).cummax(-1).values  # (N, B) last fresh at or before j
    left = torch.cat([torch.full((N, 1), -1), left[:, :-1]], -1)  # strictly before j
    right = torch.where(fresh, j, B).flip(-1).cummin(-1).values.flip(-1)  # first fresh at or after j
    right = torch.cat([right[:, 1:], torch.full((N, 1), B)], -1)  # strictly after j
    inv = lambda d, none: torch.where(none, 0.0, 1.0 / d.clamp_min(1).float())
    return torch.stack([inv(j - left, left < 0), inv(right - j, right >= B)], -1)


def features(
    top: torch.Tensor,
    p_coupled: torch.Tensor,
    masked: torch.Tensor,
    draft_depth: torch.Tensor,
    step: torch.Tensor,
    temperature,
    unseen: torch.Tensor,
) -> torch.Tensor:
    """The order model's input for N hypothetical states of one block.

    top: (N, B, 32) or (B, 32) sorted stale probabilities; p_coupled: (N, B) stale probability of
    the coupled token at each node's step; masked: (N, B) bool; draft_depth: (N, B) depth in the
    draft at which a position was committed (0: not by the draft); step: (N,) node steps;
    temperature: a float or (N,) per state; unseen: (N, B) or (B,) bool, committed since the
    stale pass before the draft (the root's ``View.unseen``).
    Returns (N, B, N_FEATURES) float32.
    """
    N, B = masked.shape
    top = top.expand(N, B, top.shape[-1]) if top.ndim == 2 else top
    pos = position_features(B).expand(N, B, POSITION)  # (N, B, POSITION)
    pc = p_coupled.float()
    T = torch.as_tensor(temperature, dtype=torch.float32).expand(N)  # (N,)
    struct = torch.stack(
        [
            masked.float(),
            (draft_depth > 0).float(),
            draft_depth.float() / B,
            (step.float() / B)[:, None].expand(N, B),
            pc,
            pc.clamp_min(1e-9).log() / LOG_SCALE,
            (T / (1 + T))[:, None].expand(N, B),
        ],
        -1,
    )  # (N, B, len(STRUCT))
    certain = -(1 - pc).clamp_min(1e-9).log()[..., None] / LOG_SCALE  # (N, B, 1)
    unseen = torch.as_tensor(unseen, dtype=torch.bool).expand(N, B)
    near = fresh_distances(unseen | (draft_depth > 0))  # (N, B, 2)
    ties = tie_features(pc, masked)  # (N, B, 2)
    return torch.cat([top.float(), struct, pos, certain, unseen.float()[..., None], near, ties], -1)


def tie_features(pc: torch.Tensor, masked: torch.Tensor) -> torch.Tensor:
    """pc: (N, B) p_coupled, masked: (N, B) bool -> (N, B, 2) float: tied with the largest
    p_coupled of the masked positions, and the first (lowest) position so tied."""
    top = pc.masked_fill(~masked, -1.0).max(-1, keepdim=True).values  # (N, 1)
    tied = masked & (pc == top)  # (N, B)
    first = tied & (tied.cumsum(-1) == 1)
    return torch.stack([tied.float(), first.float()], -1)


CONFIG_FIELDS = ("block_size", "d_model", "layers", "heads", "ff", "feature_width", "top_k", "set_hidden")


def check_config(cfg, path) -> dict:
    """The header's ``config``: a dict of positive ints, the ``OrderModel`` arguments."""
    if not isinstance(cfg, dict):
        raise ValueError(
            f"the drafter checkpoint {path}: header field 'config' must be a dict of "
            f"{', '.join(CONFIG_FIELDS)}, got {cfg!r}"
        )
    for k, v in cfg.items():
        if k not in CONFIG_FIELDS:
            raise ValueError(f"the drafter checkpoint {path}: header field 'config' has an unknown key {k!r}")
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ValueError(
                f"the drafter checkpoint {path}: header field 'config.{k}' must be a positive int, got {v!r}"
            )
    if "block_size" not in cfg:
        raise ValueError(f"the drafter checkpoint {path}: header field 'config' has no block_size")
    return cfg


def build(header: dict, sd, path, block_size: int | None) -> OrderModel:
    cfg = check_config(header.get("config"), path)
    if cfg.get("feature_width") not in FEATURE_COUNTS or cfg.get("top_k") != TOP_K:
        raise ValueError(
            f"the drafter checkpoint {path} reads {cfg.get('feature_width')} features (config.feature_width; "
            f"top-{cfg.get('top_k')}); this spotref reads {' or '.join(map(str, FEATURE_COUNTS))} (top-{TOP_K})"
        )
    if block_size is not None and cfg["block_size"] != block_size:
        raise ValueError(
            f"the drafter checkpoint {path} was trained for block size {cfg['block_size']}, "
            f"the target's block size is {block_size}"
        )
    model = OrderModel.from_config(cfg)
    try:
        model.load_state_dict({k: v.float() for k, v in sd.items()})
    except (RuntimeError, AttributeError, KeyError) as e:
        raise ValueError(f"the drafter checkpoint {path} does not match its config: {e}") from None
    return model.eval()

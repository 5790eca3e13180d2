"""Model configuration: one dataclass for all three input interfaces, with presets and a strict JSON round trip."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass, field

import numpy as np

from .codes import BIT_ORDERS, VALUE_MAPS, GF2Code
from .errors import CodeError, ConfigError

INTERFACES = ("learned", "canonical", "gf2", "permuted", "frozen_random")
#: Interfaces that read an n-bit code (bit-level analyses apply); ``frozen_random`` is frozen but has no bits.
CODED = ("canonical", "gf2", "permuted")
#: Variant names the trainer accepts: the interfaces; a fixed-code interface given the learned budget back
#: (``<interface>-matched``: ``match_params`` from ``[model]``, else ``"width"``); and an interface with a frozen
#: output head (``<interface>-randomhead``: ``output = "random"``; ``<interface>-codehead``: ``output = "code"``).
VARIANTS = INTERFACES + ("canonical-matched", "gf2-matched", "learned-randomhead", "canonical-randomhead",
                         "canonical-codehead")
#: The suffix of a variant name and the [model] field it sets.
VARIANT_SUFFIXES = {"-matched": ("match_params", True), "-randomhead": ("output", "random"),
                    "-codehead": ("output", "code")}


def variant_interface(variant: str) -> tuple[str, dict]:
    """``(interface, overrides)`` of a trainer variant name: ``"canonical-randomhead"`` ->
    ``("canonical", {"output": "random"})``; ``match_params: True`` stands for "matched, by [model]'s rule"."""
    for suffix, (key, value) in VARIANT_SUFFIXES.items():
        if variant.endswith(suffix):
            return variant.removesuffix(suffix), {key: value}
    return variant, {}
NORMS = ("rms", "ln")
MLPS = ("swiglu", "gelu")
REPEATS = ("tile", "interleave")
MATCHES = ("width", "depth")
OUTPUTS = ("learned", "code", "random")
#: How close (relative) a parameter-matched variant must land to the learned variant's trainable count.
MATCH_TOLERANCE = 0.005


@dataclass
class ModelConfig:
    """Shape and input interface of a :class:`fixedid.model.FixedIdLM`. Build one with ``ModelConfig.preset(name)``."""

    vocab_size: int = 2048
    d_model: int = 128
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int | None = None  # None: same as n_heads (no grouped-query attention)
    d_ff: int = 384
    context: int = 128
    # input interface
    interface: str = "canonical"
    n_bits: int = 16
    bit_order: str = "msb"
    value_map: str = "pm1"
    code_scale: float = 1.0
    repeat: str = "tile"
    gf2_seed: int = 0
    gf2_affine: bool = False
    gf2_matrix: list[list[int]] | None = None
    gf2_offset: list[int] | None = None
    table_seed: int = 0  # the id permutation of "permuted", the Gaussian table of "frozen_random"
    output: str = "learned"  # "code": a frozen output head, a fixed full-rank expansion of each token's code;
    # "random": a frozen head of seeded Gaussian unit-norm rows
    # backbone
    norm: str = "rms"
    norm_eps: float = 1e-5
    mlp: str = "swiglu"
    bias: bool = False
    rope_theta: float = 10000.0
    rope_head_thetas: list[float] | None = None  # one RoPE base per attention head (n_heads entries, the same in
    # every layer); None: rope_theta for every head. Heads with a small base turn every frequency quickly (they can
    # tell the token before from the ones further back); heads with a large one keep slow frequencies that compare
    # tokens by content at any distance. No Llama equivalent: such a model does not export to Hugging Face.
    init_std: float = 0.02
    embed_init_std: float | None = None  # std of a learned input table at init (None: init_std)
    seed: int = 0
    # capacity matching of a fixed-code variant (see the module docstring)
    match_params: str | None = None
    matched_from: dict | None = None  # the shape before matching: {"d_ff": ..., "n_layers": ...}
    name: str = field(default="custom", compare=False)

    def __post_init__(self):
        self.validate()
        if self.match_params is not None and self.matched_from is None:
            self._match()

    def _match(self) -> None:
        """Resolve ``match_params``: set ``d_ff`` or ``n_layers`` so the trainable count lands within
        :data:`~fixedid.config.MATCH_TOLERANCE` of the learned variant's, and record the shape it started from."""
        base = {"d_ff": self.d_ff, "n_layers": self.n_layers}
        if not self.is_fixed:
            self.matched_from = base  # the learned variant is the budget itself
            return
        field_name = "d_ff" if self.match_params == "width" else "n_layers"
        plain = dataclasses.replace(self, match_params=None, matched_from=None)
        target = trainable_params(dataclasses.replace(plain, interface="learned"))
        start = trainable_params(plain)
        step = trainable_params(dataclasses.replace(plain, **{field_name: base[field_name] + 1})) - start
        extra = (target - start) / step
        options = sorted({max(0, int(np.floor(extra))), max(0, int(np.ceil(extra)))})
        counts = {k: trainable_params(dataclasses.replace(plain, **{field_name: base[field_name] + k}))
                  for k in options}
        best = min(options, key=lambda k: abs(counts[k] - target))
        if abs(counts[best] - target) > MATCH_TOLERANCE * target:
            what = "MLP width" if field_name == "d_ff" else "layer"
            near = ", ".join(f"{k} extra {what}{'s' * (k != 1)}: {counts[k]:,} ({(counts[k] - target) / target:+.2%})"
                             for k in options)
            raise ConfigError(f"match_params={self.match_params!r} cannot land within {MATCH_TOLERANCE:.1%} of the "
                              f"learned variant's {target:,} trainable parameters ({near}); use "
                              "match_params='width'" + (" or another shape" if field_name == "d_ff" else ""))
        setattr(self, field_name, base[field_name] + best)
        self.matched_from = base

    # ----------------------------------------------------------------------------------------------------------
    @property
    def d_head(self) -> int:
        """Width of one attention head, ``d_model // n_heads``."""
        return self.d_model // self.n_heads

    @property
    def kv_heads(self) -> int:
        """Number of key/value heads: ``n_kv_heads``, or ``n_heads`` when it is None (no grouped-query attention)."""
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def one_rope_base(self) -> float | None:
        """The RoPE base every head turns by (``rope_theta``, or the one value of ``rope_head_thetas``); None where
        the heads' bases differ."""
        bases = {float(self.rope_theta)} if self.rope_head_thetas is None else {float(t) for t in self.rope_head_thetas}
        return bases.pop() if len(bases) == 1 else None

    @property
    def is_fixed(self) -> bool:
        """Whether the input is frozen (every interface but ``learned``, ``frozen_random`` included)."""
        return self.interface != "learned"

    @property
    def has_code(self) -> bool:
        """The input is an n-bit code (canonical, gf2, permuted): bit-level analyses apply."""
        return self.interface in CODED

    @property
    def code_repeats(self) -> int:
        """How many times the n-bit code is repeated to fill ``d_model`` (``d_model // n_bits``; meaningful where
        :attr:`~fixedid.config.ModelConfig.has_code`)."""
        return self.d_model // self.n_bits

    def validate(self) -> None:
        """Check every field (types, ranges, known names, the shape constraints of RoPE, grouped-query attention and
        the code's width, an explicit GF(2) matrix) and raise :class:`~fixedid.errors.ConfigError` on the first that
        fails, saying how to fix it. Runs on construction; changes nothing."""
        _check_sizes(self)
        _check_field_types(self)
        _check_ranges(self)
        _check_names(self)
        _check_shapes(self)
        _check_init(self)
        _check_code_width(self)
        _check_matching(self)
        _check_gf2(self)

    # ----------------------------------------------------------------------------------------------------------
    def recoding(self) -> GF2Code | None:
        """The GF(2) recoding of a ``gf2`` interface (None for ``canonical`` and ``learned``)."""
        if self.interface != "gf2":
            return None
        if self.gf2_matrix is not None:
            return GF2Code(np.array(self.gf2_matrix), np.array(self.gf2_offset))
        return GF2Code.random(self.n_bits, self.gf2_seed, affine=self.gf2_affine)

    def resolved(self) -> "ModelConfig":
        """A copy whose gf2 recoding is explicit (matrix and offset as bit rows), as checkpoints store it."""
        code = self.recoding()
        if code is None or self.gf2_matrix is not None:
            return self.replace()
        j = code.to_json()
        return self.replace(gf2_matrix=j["matrix"], gf2_offset=j["offset"])

    def replace(self, **changes) -> "ModelConfig":
        """A copy with ``changes`` applied (validated again); an unknown field name raises
        :class:`~fixedid.errors.ConfigError` listing the known ones."""
        unknown = set(changes) - {f.name for f in dataclasses.fields(self)}
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {sorted(unknown)}; known: {field_names()}")
        return dataclasses.replace(self, **changes)

    def to_dict(self) -> dict:
        """Every field as plain JSON-ready values (``dataclasses.asdict``); a gf2 recoding drawn by seed stays a seed
        (:meth:`~fixedid.config.ModelConfig.resolved` makes it explicit)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> "ModelConfig":
        """The config of a dict of fields, as :meth:`~fixedid.config.ModelConfig.to_dict` writes it (absent fields take
        their defaults). A non-dict, an unknown field or an invalid value raises
        :class:`~fixedid.errors.ConfigError`."""
        if not isinstance(d, dict):
            raise ConfigError(f"a model config must be a JSON object, got {type(d).__name__}")
        unknown = set(d) - set(field_names())
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {sorted(unknown)}; known: {field_names()}")
        try:
            return cls(**d)
        except TypeError as e:
            raise ConfigError(f"invalid model config: {e}") from None

    def to_json(self) -> str:
        """:meth:`~fixedid.config.ModelConfig.to_dict` as indented JSON with sorted keys."""
        return json.dumps(self.to_dict(), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "ModelConfig":
        """The config of a JSON text (:meth:`~fixedid.config.ModelConfig.to_json`); text that is not JSON raises
        :class:`~fixedid.errors.ConfigError`, as does anything :meth:`~fixedid.config.ModelConfig.from_dict` refuses."""
        try:
            d = json.loads(text)
        except json.JSONDecodeError as e:
            raise ConfigError(f"model config is not valid JSON: {e}") from None
        return cls.from_dict(d)

    @classmethod
    def preset(cls, name: str, **overrides) -> "ModelConfig":
        """A named shape (see :data:`~fixedid.config.PRESETS`) with field overrides, e.g.
        ``preset("toy", interface="gf2")``. ``"tiny"`` is refused: it names a training recipe
        (``TrainConfig.load("tiny").model_config(...)``), whose model is not this preset's."""
        if name in RENAMED_PRESETS:
            raise ConfigError(f"{name!r} is not a model preset: it names the training recipe (fixedid-train --config "
                              f"{name}; TrainConfig.load({name!r}).model_config(variant, vocab_size)); the shape that "
                              f"recipe builds on is the preset {RENAMED_PRESETS[name]!r}")
        if name not in PRESETS:
            raise ConfigError(f"unknown preset {name!r}; choose one of {sorted(PRESETS)}")
        d = dict(PRESETS[name], name=name)
        unknown = set(overrides) - set(field_names())
        if unknown:
            raise ConfigError(f"unknown ModelConfig field(s) {sorted(unknown)}; known: {field_names()}")
        d.update(overrides)
        return cls(**d)


def trainable_params(cfg: ModelConfig) -> int:
    """The exact trainable parameter count of a model of ``cfg``, from its shape (the model's own
    ``param_counts()["trainable"]``, computed without building it; a test holds the two equal)."""
    d, f, bias = cfg.d_model, cfg.d_ff, int(cfg.bias)
    q, kv = cfg.n_heads * cfg.d_head, cfg.kv_heads * cfg.d_head
    norm = d if cfg.norm == "rms" else 2 * d
    attn = d * q + 2 * d * kv + q * d + bias * (q + 2 * kv + d)
    mlp = (3 * d * f + bias * (2 * f + d)) if cfg.mlp == "swiglu" else (2 * d * f + bias * (f + d))
    table = cfg.vocab_size * d
    return (0 if cfg.is_fixed else table) + cfg.n_layers * (2 * norm + attn + mlp) + norm + \
        (0 if cfg.output != "learned" else table)


def _check_field_types(cfg: ModelConfig) -> None:
    """Each scalar field has its declared type (TOML and JSON can carry a string where a number belongs)."""
    kinds = {"int": (int,), "float": (int, float), "bool": (bool,), "str": (str,)}
    for f in dataclasses.fields(cfg):
        declared = str(f.type).replace(" ", "").split("|")
        allowed = [k for k in declared if k in kinds]
        if not allowed:  # lists and tables are checked where they are read
            continue
        v = getattr(cfg, f.name)
        if v is None and "None" in declared:
            continue
        ok = any(isinstance(v, kinds[k]) and (k == "bool" or not isinstance(v, bool)) for k in allowed)
        if not ok:
            want = " or ".join({"int": "an integer", "float": "a number", "bool": "true or false",
                                "str": "a string"}[k] for k in allowed)
            raise ConfigError(f"{f.name} must be {want}" + (" (or absent)" if "None" in declared else "")
                              + f", got {v!r}")


def _need(cond, msg) -> None:
    if not cond:
        raise ConfigError(msg)


def _check_sizes(cfg: ModelConfig) -> None:
    """The sizes are positive integers."""
    for name in ("vocab_size", "d_model", "n_layers", "n_heads", "d_ff", "context", "n_bits"):
        v = getattr(cfg, name)
        _need(isinstance(v, int) and not isinstance(v, bool) and v >= 1,
              f"{name} must be a positive integer, got {v!r}")


def _check_ranges(cfg: ModelConfig) -> None:
    """The norm's epsilon and the RoPE base are positive, the seeds not negative."""
    _need(cfg.norm_eps > 0 and cfg.rope_theta > 0, f"norm_eps and rope_theta must be positive, got "
          f"{cfg.norm_eps!r} and {cfg.rope_theta!r}")
    _need(min(cfg.gf2_seed, cfg.table_seed, cfg.seed) >= 0, "gf2_seed, table_seed and seed must be >= 0")


def _check_names(cfg: ModelConfig) -> None:
    """Every named choice is a known one."""
    _need(cfg.interface in INTERFACES, f"unknown interface {cfg.interface!r}; use one of {INTERFACES}")
    _need(cfg.bit_order in BIT_ORDERS, f"unknown bit_order {cfg.bit_order!r}; use one of {BIT_ORDERS}")
    _need(cfg.value_map in VALUE_MAPS, f"unknown value_map {cfg.value_map!r}; use one of {VALUE_MAPS}")
    _need(cfg.repeat in REPEATS, f"unknown repeat {cfg.repeat!r}; use one of {REPEATS}")
    _need(cfg.norm in NORMS, f"unknown norm {cfg.norm!r}; use one of {NORMS}")
    _need(cfg.mlp in MLPS, f"unknown mlp {cfg.mlp!r}; use one of {MLPS}")


def _check_shapes(cfg: ModelConfig) -> None:
    """The code's width, and the head shapes RoPE and grouped-query attention need."""
    _need(cfg.n_bits <= 24, f"n_bits {cfg.n_bits} is too large (at most 24)")
    _need(cfg.d_model % cfg.n_heads == 0,
          f"n_heads {cfg.n_heads} does not divide d_model {cfg.d_model}; pick a divisor")
    _need(cfg.d_head % 2 == 0, f"head size d_model/n_heads = {cfg.d_head} must be even for RoPE")
    _need(cfg.kv_heads >= 1 and cfg.n_heads % cfg.kv_heads == 0,
          f"n_kv_heads {cfg.n_kv_heads} must divide n_heads {cfg.n_heads}")
    if cfg.rope_head_thetas is not None:
        t = cfg.rope_head_thetas
        _need(isinstance(t, (list, tuple)) and len(t) == cfg.n_heads
              and all(isinstance(x, (int, float)) and not isinstance(x, bool) and x > 0 for x in t),
              f"rope_head_thetas must list one positive RoPE base per head ({cfg.n_heads}), got {t!r}")
        _need(cfg.kv_heads == cfg.n_heads, f"rope_head_thetas needs a key/value head per query head (n_kv_heads "
              f"{cfg.n_kv_heads} != n_heads {cfg.n_heads}); leave n_kv_heads out or use one rope_theta")


def _check_init(cfg: ModelConfig) -> None:
    """The code's scale and the initial weights' spreads are positive."""
    _need(cfg.code_scale > 0, f"code_scale must be positive, got {cfg.code_scale}")
    _need(cfg.init_std > 0, f"init_std must be positive, got {cfg.init_std}")
    _need(cfg.embed_init_std is None or (isinstance(cfg.embed_init_std, (int, float)) and cfg.embed_init_std > 0),
          f"embed_init_std must be a positive number (or absent for init_std), got {cfg.embed_init_std!r}")


def _check_code_width(cfg: ModelConfig) -> None:
    """A code (at the input, or the output head's) names every token, and the input code repeats to width."""
    if cfg.has_code:
        _need(cfg.vocab_size <= (1 << cfg.n_bits),
              f"vocab_size {cfg.vocab_size} > 2**n_bits = {1 << cfg.n_bits}: a {cfg.n_bits}-bit code cannot "
              "name every token; raise n_bits or shrink the vocabulary")
        _need(cfg.d_model % cfg.n_bits == 0,
              f"d_model {cfg.d_model} is not divisible by n_bits {cfg.n_bits}: the fixed code is repeated to "
              "width with no projection; pick d_model a multiple of n_bits")
    _need(cfg.output in OUTPUTS, f"unknown output {cfg.output!r}; use one of {OUTPUTS}")
    _need(cfg.output != "code" or cfg.vocab_size <= (1 << cfg.n_bits),
          f"output 'code' reads each token's {cfg.n_bits}-bit code: vocab_size {cfg.vocab_size} does not fit")


def _check_matching(cfg: ModelConfig) -> None:
    """``match_params`` is a known way, and ``matched_from`` only what it writes."""
    _need(cfg.match_params is None or cfg.match_params in MATCHES,
          f"unknown match_params {cfg.match_params!r}; use one of {MATCHES} (or leave it out)")
    _need(cfg.matched_from is None or (cfg.match_params is not None and isinstance(cfg.matched_from, dict)
                                       and set(cfg.matched_from) == {"d_ff", "n_layers"}),
          "matched_from is written by match_params ({'d_ff': ..., 'n_layers': ...}); do not set it by hand")


def _check_gf2(cfg: ModelConfig) -> None:
    """An explicit GF(2) code comes whole (matrix and offset), is a valid code and is ``n_bits`` wide."""
    if (cfg.gf2_matrix is None) != (cfg.gf2_offset is None):
        raise ConfigError("gf2_matrix and gf2_offset go together: give both (bit rows) or neither")
    if cfg.gf2_matrix is not None:
        try:
            code = GF2Code(np.array(cfg.gf2_matrix), np.array(cfg.gf2_offset))
        except CodeError as e:
            raise ConfigError(f"gf2_matrix/gf2_offset: {e}") from None
        _need(code.n_bits == cfg.n_bits, f"gf2_matrix is {code.n_bits}x{code.n_bits} but n_bits is {cfg.n_bits}")


def field_names() -> list[str]:
    """The names of every :class:`~fixedid.config.ModelConfig` field, in declaration order."""
    return [f.name for f in dataclasses.fields(ModelConfig)]


#: Named shapes. ``toy`` (128 wide, a 16-bit code) builds test models in seconds and is the base the ``tiny`` and
#: ``tiny-bpe`` training recipes override (they are narrower: see ``fixedid/configs/``); ``small`` has ~17M trainable
#: parameters as the learned variant (~14M fixed-code); ``paper-1.7b`` is the SmolLM2-1.7B shape inferred in
#: docs/paper.md (its parameter arithmetic matches the paper exactly); ``prior-1024`` is the predecessor paper's
#: model (vocab 65,536, d 1024, 32 layers, GELU).
PRESETS: dict[str, dict] = {
    "toy": dict(vocab_size=2048, d_model=128, n_layers=4, n_heads=4, d_ff=384, context=128),
    "small": dict(vocab_size=8192, d_model=384, n_layers=6, n_heads=6, d_ff=1024, context=256),
    "gpt2-small": dict(vocab_size=50257, d_model=768, n_layers=12, n_heads=12, d_ff=3072, context=1024,
                       norm="ln", mlp="gelu", bias=True),
    "paper-1.7b": dict(vocab_size=49152, d_model=2048, n_layers=24, n_heads=32, d_ff=8192, context=2048,
                       rope_theta=130000.0),
    "prior-1024": dict(vocab_size=65536, d_model=1024, n_layers=32, n_heads=32, d_ff=4096, context=1024,
                       mlp="gelu"),
}
#: Preset names that were renamed: {old name: new name}. ``tiny`` named the 128-wide shape while ``--config tiny``
#: named the (72-wide, 9-bit) recipe built on it; recorded runs and TOML files written before the rename still read.
RENAMED_PRESETS = {"tiny": "toy"}

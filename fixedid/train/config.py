"""Training configuration: a TOML file with three tables, ``[model]``, ``[data]`` and ``[train]``."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import tomllib
from importlib import resources
from dataclasses import dataclass, field
from pathlib import Path

from ..config import MATCHES, PRESETS, RENAMED_PRESETS, ModelConfig, field_names
from ..errors import ConfigError

DTYPES = ("fp32", "bf16", "auto")
PARALLEL = ("ddp", "fsdp")
OPTIMIZERS = ("adamw", "muon")
# [model] entries keyed whatever their value: the preset itself, and seed, whose absence means [train] seed
MODEL_ALWAYS_KEYED = ("preset", "seed")
#: The default ``[model] preset``.
DEFAULT_PRESET = "toy"
#: How a preset is spelt in the fingerprint and the trained key: the name it had when runs were first keyed, so
#: caches and recorded keys stay valid across the rename (:data:`~fixedid.config.RENAMED_PRESETS`).
KEYED_PRESET_NAMES = {new: old for old, new in RENAMED_PRESETS.items()}
SCHEDULE_ONLY = ("steps", "save_every", "eval_every", "log_every", "compile", "keep")


def preset_of(model: dict) -> str:
    """The preset a ``[model]`` table builds on, an old name (a run recorded before a rename) read as the new one."""
    name = model.get("preset", DEFAULT_PRESET)
    return RENAMED_PRESETS.get(name, name) if isinstance(name, str) else name


@dataclass
class DataConfig:
    """``source``: ``"synthetic"``, a local txt/jsonl/parquet path or directory, or a hub dataset name. ``tokenizer``:
    ``"bpe"`` (train a byte-level BPE of ``vocab_size`` on the first ``tokenizer_train_bytes`` of text), ``"words"``
    (a word-level tokenizer of at most ``vocab_size`` words of that text, with one unknown token: the pieces the BPE
    ends with, without its byte alphabet and merges), a ``tokenizer.json`` path or a hub tokenizer name.
    ``train_tokens`` / ``val_tokens``: how many tokens to pretokenise. ``val_split``: a split of the source to
    validate on; empty holds out the head of the training stream instead. ``shards``: an existing shard directory to
    train from (skips tokenising). ``synthetic_mix``: sentence-kind probabilities overriding the built-in language's
    default mixture (e.g. ``{ioi = 0.5}``), and optionally ``retell``, the probability that a document is told twice
    (default 0.85). ``split_word_rate``: the share of training words written in two pieces at a seeded random cut
    (:mod:`fixedid.data.resegment`), so that the same word is segmented more than one way; the validation text keeps
    the tokenizer's own segmentation (default 0: none). ``split_word_scope``: ``"occurrence"`` (each occurrence of a
    word drawn on its own, as BPE dropout does; the default) or ``"document"`` (one draw per word and document, so a
    word that comes back in a document is written the same way there, and differently in other documents)."""

    source: str = "synthetic"
    text_field: str = "text"
    split: str = "train"
    val_split: str = ""
    tokenizer: str = "bpe"
    vocab_size: int = 2048
    tokenizer_train_bytes: int = 2_000_000
    train_tokens: int = 2_000_000
    val_tokens: int = 100_000
    shards: str = ""
    synthetic_mix: dict = field(default_factory=dict)
    split_word_rate: float = 0.0
    split_word_scope: str = "occurrence"


#: [data] entries added after run keys were published: written (and keyed) only when set to other than their
#: default, so a table that leaves them at the default keeps the key and the prepared data it had before.
DATA_ADDED_LATER = ("split_word_scope",)


#: [train] entries added after run keys were published, likewise written and keyed only when not at their default
TRAIN_ADDED_LATER = ("optimizer", "muon_lr_ratio", "muon_momentum")


def _recorded(table, added_later: tuple[str, ...]) -> dict:
    """A config table as runs record and are keyed on: its entries, less those added later that sit at their
    default (a dataclass built with no arguments)."""
    default = type(table)()
    return {k: v for k, v in dataclasses.asdict(table).items()
            if not (k in added_later and v == getattr(default, k))}


def data_table(d: DataConfig) -> dict:
    """``d`` as the dict runs record and are keyed on (see :data:`~fixedid.train.config.DATA_ADDED_LATER`)."""
    return _recorded(d, DATA_ADDED_LATER)


@dataclass
class OptimConfig:
    """``batch_size`` is the global number of sequences per optimizer step, whatever the number of ranks;
    ``micro_batch_size`` the sequences per forward on one rank (0: as large as possible), so gradient accumulation
    is ``batch_size / (micro_batch_size * world_size)``. AdamW with ``lr`` after ``warmup_steps`` of linear warmup,
    constant until ``decay_start`` (0: no constant phase), then cosine decay to ``lr * min_lr_ratio`` at
    ``decay_steps`` (0: ``steps``) - a warmup-stable-decay schedule when ``decay_start`` is set; ``weight_decay`` on
    matrices only (never on norm gains or biases), ``embed_weight_decay`` (default: ``weight_decay``) on a learned
    input table; gradients clipped to ``grad_clip`` (0: off). ``optimizer``: ``adamw``, or ``muon``
    (:mod:`fixedid.train.muon`: Muon with momentum ``muon_momentum`` at ``lr * muon_lr_ratio`` on the blocks' weight
    matrices, AdamW with ``beta1`` and ``beta2`` on the rest; whole matrices, so not with ``parallel = "fsdp"``).
    ``dtype``: ``fp32``, ``bf16`` (autocast) or ``auto`` (bf16 on CUDA, fp32 on CPU). ``seed``: the data order and,
    unless ``[model]`` sets ``seed``, the initialisation (so seeds 0, 1, 2 are independent runs). ``parallel``:
    ``ddp`` or ``fsdp`` (FSDP2) under torchrun. ``keep``: steps whose model is also kept as a snapshot in
    ``<variant>/steps/<step:07d>`` (model and tokenizer, no optimizer state), for analyses across training.

    The schedule's points (``warmup_steps``, ``decay_start``, ``decay_steps`` and each ``keep`` entry) are an
    integer (a step) or a float in [0, 1] (that fraction of ``steps``, rounded; the packaged configs use fractions,
    so ``--steps`` shortens a run and keeps its shape): :meth:`~fixedid.train.config.OptimConfig.step_of` resolves one,
    :attr:`~fixedid.train.config.OptimConfig.kept_steps` the snapshots. A point past ``steps`` is refused. Extending a
    run (``--resume --steps N``) moves fractional points with the new length; the steps already trained keep the rates
    they had."""

    steps: int = 1000
    batch_size: int = 32
    micro_batch_size: int = 0
    lr: float = 3e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int | float = 50
    decay_steps: int | float = 0
    decay_start: int | float = 0
    weight_decay: float = 0.1
    embed_weight_decay: float | None = None
    beta1: float = 0.9
    beta2: float = 0.95
    optimizer: str = "adamw"
    muon_lr_ratio: float = 1.0
    muon_momentum: float = 0.95
    grad_clip: float = 1.0
    dtype: str = "auto"
    compile: bool = False
    parallel: str = "ddp"
    seed: int = 0
    eval_every: int = 100
    eval_batches: int = 8
    save_every: int = 500
    log_every: int = 10
    keep: list = field(default_factory=list)

    def step_of(self, point: int | float) -> int:
        """A schedule point as a step: an integer is a step, a float in [0, 1] that fraction of ``steps``."""
        return round(point * self.steps) if isinstance(point, float) else point

    @property
    def warmup(self) -> int:
        """``warmup_steps`` as a step (:meth:`~fixedid.train.config.OptimConfig.step_of`)."""
        return self.step_of(self.warmup_steps)

    @property
    def decay_begin(self) -> int:
        """The step the cosine decay starts from (after warm-up; 0 when ``decay_start`` is 0)."""
        return self.step_of(self.decay_start)

    @property
    def decay_end(self) -> int:
        """The step the cosine decay reaches ``lr * min_lr_ratio``: ``decay_steps`` as a step, or ``steps`` when it
        is 0."""
        return self.step_of(self.decay_steps) or self.steps

    @property
    def kept_steps(self) -> list[int]:
        """The steps ``keep`` asks snapshots of, resolved and sorted (a fraction is at least step 1)."""
        return sorted({max(1, self.step_of(k)) for k in self.keep})

    @property
    def snapshot_steps(self) -> list[int]:
        """The kept steps before the last one (the last step is the final checkpoint itself)."""
        return [k for k in self.kept_steps if k < self.steps]


def train_table(t: OptimConfig) -> dict:
    """``t`` as the dict runs record and are keyed on (see :data:`~fixedid.train.config.TRAIN_ADDED_LATER`)."""
    return _recorded(t, TRAIN_ADDED_LATER)


@dataclass
class TrainConfig:
    """A whole training config: the ``[model]`` table as written (a dict: ``preset`` and
    :class:`~fixedid.config.ModelConfig` overrides, resolved per variant by
    :meth:`~fixedid.train.config.TrainConfig.model_config`), ``[data]`` as a :class:`~fixedid.train.config.DataConfig`
    and ``[train]`` as an :class:`~fixedid.train.config.OptimConfig`. Validated on construction; build one with
    :meth:`~fixedid.train.config.TrainConfig.load` or :meth:`~fixedid.train.config.TrainConfig.from_dict`."""

    model: dict = field(default_factory=lambda: {"preset": DEFAULT_PRESET})
    data: DataConfig = field(default_factory=DataConfig)
    train: OptimConfig = field(default_factory=OptimConfig)

    def __post_init__(self):
        self.validate()

    def validate(self) -> None:
        """Every key of the three tables, by type and range; one :class:`~fixedid.errors.ConfigError` naming the first
        bad one."""
        _check_model_table(self.model)
        _check_train(self.train)
        _check_data(self.data)

    def model_config(self, variant: str, vocab_size: int) -> ModelConfig:
        """The variant's model config: ``[model]`` on its preset, the interface and vocabulary size, and the
        initialisation seed ``[train] seed`` unless ``[model]`` sets ``seed`` itself. A ``<interface>-matched``
        variant gets ``match_params`` (``[model]``'s, else ``"width"``); the plain variants never match, so one
        ``[model]`` table serves them all."""
        from ..config import variant_interface

        m = dict(self.model)
        m.pop("preset", None)
        preset = preset_of(self.model)
        m.setdefault("seed", self.train.seed)
        interface, overrides = variant_interface(variant)
        match = m.pop("match_params", None)
        if overrides.pop("match_params", False):
            m["match_params"] = match or "width"
        m.update(overrides)
        return ModelConfig.preset(preset, **m, interface=interface, vocab_size=vocab_size)

    def to_dict(self) -> dict:
        """The three tables as a run records them (``run.json``): ``{"model", "data", "train"}``, with entries added
        later left out while at their default (:data:`~fixedid.train.config.DATA_ADDED_LATER`,
        :data:`~fixedid.train.config.TRAIN_ADDED_LATER`)."""
        return {"model": dict(self.model), "data": data_table(self.data), "train": train_table(self.train)}

    def fingerprint(self) -> str:
        """Hex sha256 of what changes what is learned: the recorded tables without the schedule-only keys
        (``steps``, ``save_every``, ``eval_every``, ``log_every``, ``compile``, ``keep``) and without ``[model]``
        entries that restate their preset. ``--resume`` refuses an output directory whose run has another
        fingerprint."""
        d = self._keyed()
        for k in SCHEDULE_ONLY:
            d["train"].pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def trained_key(self) -> str:
        """sha256 of everything that changes what a run trains and keeps: the fingerprint's keys with the schedule's
        points resolved to steps, plus ``steps`` and the kept snapshots (a cache of trained runs is keyed on it), so
        two spellings of one training share a key."""
        d = self._keyed()
        t = self.train
        d["train"].update(warmup_steps=t.warmup, decay_start=t.decay_begin, decay_steps=t.decay_end,
                          keep=t.kept_steps)
        for k in ("save_every", "eval_every", "log_every", "compile"):
            d["train"].pop(k)
        return hashlib.sha256(json.dumps(d, sort_keys=True).encode()).hexdigest()

    def _keyed(self) -> dict:
        """:meth:`~fixedid.train.config.TrainConfig.to_dict` with ``[model]``'s entries that restate their preset's own
        value left out (``gf2_seed = 0`` written out trains what leaving it out trains), so the fingerprint and the
        trained key name the training, not its spelling. Kept whatever their value: ``preset``, and ``seed``, whose
        absence means ``[train] seed`` (see :meth:`~fixedid.train.config.TrainConfig.model_config`), not the
        preset's."""
        d = self.to_dict()
        preset = ModelConfig.preset(preset_of(self.model)).to_dict()
        d["model"] = {k: v for k, v in d["model"].items()
                      if k in MODEL_ALWAYS_KEYED or k not in preset or preset[k] != v}
        if "preset" in d["model"]:
            name = preset_of(d["model"])
            d["model"]["preset"] = KEYED_PRESET_NAMES.get(name, name)
        return d

    def differences(self, other: "TrainConfig") -> list[str]:
        """The keys (``"table.key"``) on which ``other`` trains something else, in the terms of
        :meth:`~fixedid.train.config.TrainConfig.fingerprint` (schedule-only keys ignored); empty when the fingerprints
        agree."""
        a, b = self._keyed(), other._keyed()
        keys = []
        for table in a:
            for k in sorted(set(a[table]) | set(b[table])):
                if a[table].get(k) != b[table].get(k) and k not in SCHEDULE_ONLY:
                    keys.append(f"{table}.{k}")
        return keys

    @classmethod
    def from_dict(cls, d: dict) -> "TrainConfig":
        """A config from its three tables as parsed TOML or a run's recorded ``config``; a missing table takes its
        defaults, an unknown table or key raises :class:`~fixedid.errors.ConfigError` naming it."""
        if not isinstance(d, dict):
            raise ConfigError("a training config must be a table with [model], [data] and [train]")
        unknown = set(d) - {"model", "data", "train"}
        if unknown:
            raise ConfigError(f"unknown table(s) {sorted(unknown)} in the training config; use [model], [data], "
                              "[train]")
        return cls(model=dict(d.get("model", {"preset": DEFAULT_PRESET})),
                   data=_table(DataConfig, d.get("data", {}), "data"),
                   train=_table(OptimConfig, d.get("train", {}), "train"))

    @classmethod
    def load(cls, spec) -> "TrainConfig":
        """Load a TOML file, a run's ``run.json`` (the config a run directory was trained with), or a config
        shipped with the package by name (``"tiny"``, ``"small"``, ``"paper-1.7b"``; see
        :func:`~fixedid.train.config.packaged_configs`) when ``spec`` is not an existing file."""
        path = Path(spec)
        if not path.exists() and str(spec).removesuffix(".toml") in packaged_configs():
            resource = resources.files("fixedid").joinpath(f"configs/{str(spec).removesuffix('.toml')}.toml")
            return cls._parse(resource.read_text(), f"packaged config {spec!r}")
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(f"config file {path} does not exist; pass a TOML file or one of the packaged configs "
                              f"{packaged_configs()}") from None
        except (OSError, UnicodeDecodeError) as e:
            raise ConfigError(f"config file {path} cannot be read: {e}") from None
        if path.suffix == ".json":
            try:
                record = json.loads(text)
            except ValueError as e:
                raise ConfigError(f"config file {path} is not valid JSON: {e}") from None
            return cls.from_dict(record.get("config", record) if isinstance(record, dict) else record)
        return cls._parse(text, f"config file {path}")

    @classmethod
    def _parse(cls, text: str, what: str) -> "TrainConfig":
        try:
            d = tomllib.loads(text)
        except tomllib.TOMLDecodeError as e:
            raise ConfigError(f"{what} is not valid TOML: {e}") from None
        return cls.from_dict(d)

    def replace_train(self, **changes) -> "TrainConfig":
        """A copy with ``[train]`` keys changed (e.g. ``steps=...``, ``seed=...``), validated again; ``[model]`` is
        copied and ``[data]`` shared."""
        return TrainConfig(model=dict(self.model), data=self.data,
                           train=dataclasses.replace(self.train, **changes))


def packaged_configs() -> list[str]:
    """Names of the training configs shipped inside the package (``experiments/configs/`` links to them)."""
    return sorted(p.name.removesuffix(".toml") for p in resources.files("fixedid").joinpath("configs").iterdir()
                  if p.name.endswith(".toml"))


def _check_int(what: str, v, lowest: int) -> None:
    if not isinstance(v, int) or isinstance(v, bool) or v < lowest:
        kind = "a positive" if lowest == 1 else "a non-negative"
        raise ConfigError(f"{what} must be {kind} integer, got {v!r}")


def _check_model_table(model: dict) -> None:
    m = dict(model)
    m.pop("preset", None)
    preset = preset_of(model)
    for forbidden in ("interface", "vocab_size", "matched_from"):
        if forbidden in m:
            raise ConfigError(f"[model] {forbidden} is set by the trainer (the variant / the tokenizer / "
                              "match_params); remove it from the config")
    unknown = set(m) - set(field_names())
    if unknown:
        raise ConfigError(f"unknown [model] key(s) {sorted(unknown)}; known: ['preset'] + {field_names()}")
    match = m.pop("match_params", None)
    if match is not None and match not in MATCHES:
        raise ConfigError(f"[model] match_params {match!r} is not one of {MATCHES}; it applies to the "
                          "-matched variants (canonical-matched, gf2-matched)")
    # the vocabulary comes from the tokenizer (checked against 2**n_bits when the data is prepared): here a
    # stand-in that fits the code, so a narrow code (n_bits 9 for the tiny recipe's 380 words) is not refused
    bits = m.get("n_bits")
    if preset in PRESETS and isinstance(bits, int) and not isinstance(bits, bool) and 1 <= bits <= 24:
        m["vocab_size"] = min(PRESETS[preset]["vocab_size"], 1 << bits)
    ModelConfig.preset(preset, **m)  # raises ConfigError on a bad preset or value (matching: per variant)


def _check_train(t: OptimConfig) -> None:
    for k in ("steps", "batch_size", "eval_batches", "save_every", "log_every", "eval_every"):
        _check_int(f"[train] {k}", getattr(t, k), 1)
    for k in ("micro_batch_size", "seed"):
        _check_int(f"[train] {k}", getattr(t, k), 0)
    for k in ("warmup_steps", "decay_steps", "decay_start"):
        _check_point(f"[train] {k}", getattr(t, k), t.steps)
    if t.decay_start and t.decay_begin >= t.decay_end:
        raise ConfigError(f"[train] decay_start {t.decay_start} (step {t.decay_begin}) must come before the end "
                          f"of the decay (step {t.decay_end}); lower it or set decay_start = 0")
    if not isinstance(t.keep, list):
        raise ConfigError(f"[train] keep must be a list of steps or fractions of steps, got {t.keep!r}")
    for k in t.keep:
        _check_point("[train] keep entry", k, t.steps)
    _check_types(t)
    if t.embed_weight_decay is not None and (not isinstance(t.embed_weight_decay, (int, float))
                                             or t.embed_weight_decay < 0):
        raise ConfigError(f"[train] embed_weight_decay must be >= 0, got {t.embed_weight_decay!r}")
    if not t.lr > 0 or not 0 <= t.min_lr_ratio <= 1 or t.weight_decay < 0 or t.grad_clip < 0:
        raise ConfigError("[train] needs lr > 0, 0 <= min_lr_ratio <= 1, weight_decay >= 0 and grad_clip >= 0")
    if not (0 <= t.beta1 < 1 and 0 <= t.beta2 < 1):
        raise ConfigError(f"[train] beta1 and beta2 must be in [0, 1), got {t.beta1!r} and {t.beta2!r}")
    if t.dtype not in DTYPES:
        raise ConfigError(f"[train] dtype {t.dtype!r} is not one of {DTYPES}")
    if t.parallel not in PARALLEL:
        raise ConfigError(f"[train] parallel {t.parallel!r} is not one of {PARALLEL}")
    if t.optimizer not in OPTIMIZERS:
        raise ConfigError(f"[train] optimizer {t.optimizer!r} is not one of {OPTIMIZERS}")
    if not t.muon_lr_ratio > 0 or not 0 <= t.muon_momentum < 1:
        raise ConfigError(f"[train] needs muon_lr_ratio > 0 and muon_momentum in [0, 1), got {t.muon_lr_ratio!r} "
                          f"and {t.muon_momentum!r}")
    if t.optimizer == "muon" and t.parallel == "fsdp":
        raise ConfigError('[train] optimizer = "muon" orthogonalises whole matrices, which FSDP shards across ranks; '
                          'use parallel = "ddp" or optimizer = "adamw"')


def _check_data(d: DataConfig) -> None:
    for k in ("source", "text_field", "split", "val_split", "tokenizer", "shards"):
        if not isinstance(getattr(d, k), str):
            raise ConfigError(f"[data] {k} must be a string, got {getattr(d, k)!r}")
    if d.synthetic_mix:
        if not isinstance(d.synthetic_mix, dict) or not d.source.startswith("synthetic"):
            raise ConfigError("[data] synthetic_mix is a table of sentence-kind weights, and only applies to "
                              "source = \"synthetic\"")
        from ..data.corpus import synthetic_language
        from ..errors import DataError

        try:
            synthetic_language(0, d.synthetic_mix)
        except DataError as e:
            raise ConfigError(f"[data] synthetic_mix: {e}") from None
    for k in ("vocab_size", "tokenizer_train_bytes", "train_tokens", "val_tokens"):
        _check_int(f"[data] {k}", getattr(d, k), 1)
    r = d.split_word_rate
    if isinstance(r, bool) or not isinstance(r, (int, float)) or not 0 <= r < 1:
        raise ConfigError(f"[data] split_word_rate must be a number in [0, 1) (the share of training words written in "
                          f"two pieces), got {r!r}")
    from ..data.resegment import SCOPES

    if d.split_word_scope not in SCOPES:
        raise ConfigError(f"[data] split_word_scope must be \"occurrence\" (a draw per occurrence of a word) or "
                          f"\"document\" (one per word and document), got {d.split_word_scope!r}")
    if r and d.shards:
        raise ConfigError("[data] split_word_rate applies when fixedid tokenizes the text; with shards set the "
                          "text is already tokenized: remove one of them")


def _check_point(what: str, v, steps: int) -> None:
    """A schedule point: an integer step in [0, steps] or a float fraction in [0, 1]."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ConfigError(f"{what} must be a step (an integer) or a fraction of steps (a float in [0, 1]), got {v!r}")
    if isinstance(v, float) and not 0 <= v <= 1:
        raise ConfigError(f"{what} {v!r} is a float, so a fraction of steps, and must be in [0, 1]; write an integer "
                          "for a step")
    if isinstance(v, int) and not 0 <= v <= steps:
        raise ConfigError(f"{what} {v} is not a step of this run (0 to steps = {steps}); lower it or give a fraction "
                          "of steps (a float in [0, 1]) so it follows --steps")


def _check_types(t: OptimConfig) -> None:
    """Every float key is a real number, every flag a boolean (TOML's ``lr = "3e-3"`` is a string)."""
    for k in ("lr", "min_lr_ratio", "weight_decay", "beta1", "beta2", "grad_clip", "muon_lr_ratio", "muon_momentum"):
        v = getattr(t, k)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            raise ConfigError(f"[train] {k} must be a number, got {v!r}")
    if not isinstance(t.compile, bool):
        raise ConfigError(f"[train] compile must be true or false, got {t.compile!r}")
    for k in ("dtype", "parallel", "optimizer"):
        if not isinstance(getattr(t, k), str):
            raise ConfigError(f"[train] {k} must be a string, got {getattr(t, k)!r}")


def _table(cls, d, name):
    if not isinstance(d, dict):
        raise ConfigError(f"[{name}] must be a table")
    known = {f.name for f in dataclasses.fields(cls)}
    unknown = set(d) - known
    if unknown:
        raise ConfigError(f"unknown [{name}] key(s) {sorted(unknown)}; known: {sorted(known)}")
    return cls(**d)

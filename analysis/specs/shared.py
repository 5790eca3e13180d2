"""The parameters many analyses share, declared once: the prompt-pair source (``--task``, ``--pairs``, or one
``--clean/--corrupt/--answer/--wrong``) with the ``prepare`` that turns it into a
:class:`~analysis.pairs.PairBatch`, the metric, the corpus (``--data``, ``--tokens``) and the seed."""

from __future__ import annotations

from analysis.engine.metrics import DEFAULT_METRIC, METRICS
from analysis.errors import AnalysisError
from analysis.specs import types
from analysis.specs.base import Param

TASK_HELP = "built-in task: ioi, agreement, facts or induction, or the control induction_unlisted"
PAIRS_GROUP = "prompt pairs (one of)"
DATA_HELP = "a .txt, .jsonl or .npy file (default: the checkpoint's own validation data)"


def data(help: str = DATA_HELP) -> Param:
    """``--data FILE``: the corpus an analysis reads."""
    return Param("data", None, help, metavar="FILE")


def tokens(default: int, help: str = "tokens to evaluate", low: int = 1) -> Param:
    """``--tokens N``: how many tokens of the corpus."""
    return Param("tokens", default, help, type=types.at_least(low) if low != 1 else types.positive_int)


def seed(help: str = "seed of the random draws") -> Param:
    """``--seed N``."""
    return Param("seed", 0, help, type=int)


def n_pairs(default: int = 16, help: str = "pairs drawn for --task", low: int = 1) -> Param:
    """``--n-pairs N``."""
    return Param("n_pairs", default, help, type=types.at_least(low) if low != 1 else types.positive_int)


def metric(default: str = DEFAULT_METRIC) -> Param:
    """``--metric NAME`` on the answer and wrong tokens."""
    return Param("metric", default, "what is measured on the answer and wrong tokens (normalized_logit_diff: 0 at "
                 "the corrupted run, 1 at the clean run)", choices=tuple(sorted(METRICS)))


def pair_params(n: int = 16) -> tuple[Param, ...]:
    """The prompt-pair source, ``--n-pairs`` and ``--seed`` (read by :func:`prepare_pairs`)."""
    return (Param("task", None, TASK_HELP, group=PAIRS_GROUP),
            Param("pairs_file", None, "JSONL file of {clean, corrupt, answer, wrong}", option="--pairs",
                  metavar="FILE", group=PAIRS_GROUP),
            Param("clean", None, "clean prompt (with --corrupt, --answer, --wrong)", group=PAIRS_GROUP),
            Param("corrupt", None, "corrupted prompt, of the clean prompt's token length", group=PAIRS_GROUP),
            Param("answer", None, "the word that continues the clean prompt (leading space is added)",
                  group=PAIRS_GROUP),
            Param("wrong", None, "the competing word", group=PAIRS_GROUP),
            n_pairs(n), seed("seed of the --task pairs"))


PAIR_SOURCE = ("task", "pairs_file", "clean", "corrupt", "answer", "wrong", "n_pairs", "seed")
_MANUAL = ("clean", "corrupt", "answer", "wrong")


def check_pairs(params: dict) -> None:
    """Exactly one source of pairs: --task, --pairs, or all four of --clean/--corrupt/--answer/--wrong."""
    given = [params.get("task") is not None, params.get("pairs_file") is not None,
             any(params.get(k) is not None for k in _MANUAL)]
    if sum(given) != 1:
        raise AnalysisError("give exactly one source of pairs: --task NAME, --pairs FILE, or --clean/--corrupt/"
                            "--answer/--wrong")
    if given[2] and any(params.get(k) is None for k in _MANUAL):
        raise AnalysisError("--clean, --corrupt, --answer and --wrong go together: give all four")


def pairs_of(model, params: dict):
    """The :class:`~analysis.pairs.PairBatch` the pair parameters name, for ``model``'s tokenizer."""
    from analysis.pairs import make_pairs, read_pairs_jsonl
    from analysis.tasks import task_pairs

    check_pairs(params)
    if params.get("task") is not None:
        return task_pairs(model, params["task"], params["n_pairs"], seed=params["seed"])
    if params.get("pairs_file") is not None:
        return make_pairs(model, read_pairs_jsonl(params["pairs_file"]))
    return make_pairs(model, {k: params[k] for k in _MANUAL})


def prepare_pairs(model, params: dict) -> dict:
    """``params`` with the pair source replaced by ``pairs`` (a :class:`~analysis.pairs.PairBatch`)."""
    rest = {k: v for k, v in params.items() if k not in PAIR_SOURCE}
    return rest | {"pairs": pairs_of(model, params)}


__all__ = ["DATA_HELP", "PAIRS_GROUP", "PAIR_SOURCE", "TASK_HELP", "check_pairs", "data", "metric", "n_pairs",
           "pair_params", "pairs_of", "prepare_pairs", "seed", "tokens"]

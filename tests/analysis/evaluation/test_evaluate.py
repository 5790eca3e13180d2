"""lm-eval through the fixedid model: parity with the model's own log-softmax, rolling windows, greedy generation,
the shipped built-in tasks, and the eval command line. Offline: the tasks read JSONL shipped with the package."""

import json
from types import SimpleNamespace

import numpy as np
import pandas as pd
import pytest
import torch

from analysis import AnalysisError
from analysis.evaluation.lmeval import BUILTIN_TASKS, TASKS_DIR, FixedIdEvalLM, task_docs, task_manager

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory, tokenizer):
    return tiny_checkpoint(tmp_path_factory, tokenizer, "canonical", context=24)


def own_logprob(model, ctx, cont):
    """The model's own log-softmax summed over the continuation, on the last ``context`` tokens (left-truncated)."""
    whole = (ctx + cont)[-(model.cfg.context + 1):]
    with torch.no_grad():
        lp = torch.log_softmax(model(torch.tensor([whole[:-1]]))[0].double(), -1)
    n = len(cont)
    return float(sum(lp[len(whole) - 1 - n + i, t] for i, t in enumerate(cont)))


def test_loglikelihood_equals_the_models_own_log_softmax(ckpt, monkeypatch):
    lm = FixedIdEvalLM(model=ckpt, batch_size=3)
    g = torch.Generator().manual_seed(0)
    reqs = []
    for n_ctx, n_cont in [(3, 1), (10, 4), (23, 1), (24, 2), (40, 3), (70, 5), (5, 24)]:  # shorter and longer
        ids = torch.randint(0, ckpt.cfg.vocab_size, (n_ctx + n_cont,), generator=g).tolist()
        reqs.append((("c", "x"), ids[:n_ctx], ids[n_ctx:]))
    got = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    for (_, ctx, cont), (score, greedy) in zip(reqs, got):
        assert abs(score - own_logprob(ckpt, ctx, cont)) < 1e-5
        assert isinstance(greedy, bool)
    # a token budget below one batch's width x rows splits the batches (one row per forward here): same answers
    split = FixedIdEvalLM(model=ckpt, batch_size=3, max_batch_tokens=30)
    assert split._rows(24) == 1 and split._rows(10) == 3 and lm._rows(24) == 3
    for (a, ga), (b, gb) in zip(split._loglikelihood_tokens(reqs, disable_tqdm=True), got):
        assert abs(a - b) < 1e-5 and ga == gb
    import analysis.evaluation.lmeval_model as lmeval_model

    monkeypatch.setattr(lmeval_model, "SCORE_CHUNK", 3)  # continuations scored across chunk boundaries
    for (a, ga), (b, gb) in zip(lm._loglikelihood_tokens(reqs, disable_tqdm=True), got):
        assert abs(a - b) < 1e-5 and ga == gb  # float32 rounding: a matmul of 3 rows need not round as one of all
    monkeypatch.undo()
    with pytest.raises(AnalysisError, match="max_batch_tokens must be positive"):
        FixedIdEvalLM(model=ckpt, max_batch_tokens=0)
    # is_greedy: the argmax continuation is greedy, another one is not
    ctx = reqs[1][1]
    with torch.no_grad():
        best = int(ckpt(torch.tensor([ctx]))[0, -1].argmax())
    (_, g1), (_, g2) = lm._loglikelihood_tokens([(None, ctx, [best]), (None, ctx, [(best + 1) % 50])],
                                                 disable_tqdm=True)
    assert g1 and not g2
    with pytest.raises(AnalysisError, match="does not fit"):
        lm._loglikelihood_tokens([(None, [1], list(range(25)))], disable_tqdm=True)


def test_host_rows_are_the_maximal_rows_that_extend_each_row():
    from analysis.evaluation.shared_rows import host_rows

    rng = np.random.default_rng(0)
    rows = [tuple(rng.integers(0, 3, size=rng.integers(1, 6)).tolist()) for _ in range(200)]
    host = host_rows(rows)
    distinct = set(rows)
    # brute force: the rows no other row extends, and for each row those that extend it
    maximal = {r for r in distinct if not any(o != r and o[:len(r)] == r for o in distinct)}
    assert set(host) == distinct and set(host.values()) == maximal
    for r, h in host.items():
        assert h[:len(r)] == r and h in maximal


def test_requests_that_share_a_prefix_share_one_row(ckpt):
    lm = FixedIdEvalLM(model=ckpt, batch_size=4)
    g = torch.Generator().manual_seed(1)
    a = torch.randint(0, ckpt.cfg.vocab_size, (12,), generator=g).tolist()
    b = torch.randint(0, ckpt.cfg.vocab_size, (9,), generator=g).tolist()
    reqs = [(None, a[:5], a[5:6]), (None, a[:5], [(a[5] + 1) % 50]),  # two options of one document: one row
            (None, a[:3], a[3:8]), (None, a[:8], a[8:12]),  # a prefix of a longer request's row, and that request
            (None, a[:5], a[5:6]),  # a repeat
            (None, b[:4], b[4:9]), (None, b[:2], [b[2]]),  # another document
            (None, a[:9] + [b[0]], [b[1]])]  # diverges from a's row after 9 tokens: a row of its own
    seen = []
    forward = ckpt.forward
    try:
        ckpt.forward = lambda x, **kw: (seen.append(x.shape[0]), forward(x, **kw))[1]
        got = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    finally:
        del ckpt.forward
    assert sum(seen) == 3  # rows a[:11], b[:8], a[:9] + b[:1]: every other request is read from one of them
    for (_, ctx, cont), (score, greedy) in zip(reqs, got):
        assert abs(score - own_logprob(ckpt, ctx, cont)) < 1e-5
    assert got[0] == got[4]


def test_text_requests_rolling_and_generation(ckpt):
    lm = FixedIdEvalLM(model=ckpt, batch_size=4)
    text = "Mary and John went to the store. John gave a book to Mary."
    req = SimpleNamespace(args=("Mary and John went to the", " store"))
    (score, _), = lm.loglikelihood([req], disable_tqdm=True)
    ids = lm.tok_encode("Mary and John went to the store")
    n_cont = len(ids) - len(lm.tok_encode("Mary and John went to the"))
    assert abs(score - own_logprob(ckpt, ids[:-n_cont], ids[-n_cont:])) < 1e-5
    # the batched tokenization splits every request as lm-eval's own TemplateLM.loglikelihood does
    from lm_eval.api.model import TemplateLM

    mixed = [SimpleNamespace(args=a) for a in [("Mary and John went to the ", "store"), ("", " Mary went"),
                                                ("John gave a book to", " Mary"), ("John gave a book to", " John"),
                                                ("The", " book of the")]]
    assert lm.loglikelihood(mixed, disable_tqdm=True) == TemplateLM.loglikelihood(lm, mixed, disable_tqdm=True)
    # rolling: a text within the context is one window, its first token conditioned on the end-of-text token
    short = "Mary went to the store."
    (rolled,) = lm.loglikelihood_rolling([SimpleNamespace(args=(short,))], disable_tqdm=True)
    t = lm.tok_encode(short)
    assert abs(rolled - own_logprob(ckpt, [lm.eot_token_id], t)) < 1e-5
    # a text longer than the context: the sum over disjoint windows covers every token once
    long = " ".join([text] * 4)
    assert len(lm.tok_encode(long)) > 2 * ckpt.cfg.context
    (rolled_long,) = lm.loglikelihood_rolling([SimpleNamespace(args=(long,))], disable_tqdm=True)
    assert np.isfinite(rolled_long) and rolled_long < rolled
    # generation: greedy, equal to the model's own greedy continuation, cut at the stop string
    prompts = ["Mary and John went to the", "John gave a book to"]
    outs = lm.generate_until([SimpleNamespace(args=(p, {"until": [], "max_gen_toks": 5})) for p in prompts],
                             disable_tqdm=True)
    for p, o in zip(prompts, outs):
        ids = lm.tok_encode(p)
        new = ckpt.generate(torch.tensor([ids]), max_new_tokens=5)[0, len(ids):].tolist()
        new = new[:new.index(lm.eot_token_id)] if lm.eot_token_id in new else new
        assert o == lm.tok_decode(new) and len(o) > 0
    cut = lm.generate_until([SimpleNamespace(args=(prompts[0], {"until": [outs[0].split()[0]],
                                                                  "max_gen_toks": 5}))], disable_tqdm=True)
    assert outs[0].split()[0] not in cut[0]
    with pytest.raises(AnalysisError, match="greedily"):
        lm.generate_until([SimpleNamespace(args=(prompts[0], {"do_sample": True}))], disable_tqdm=True)


def test_simple_evaluate_finds_the_model_and_the_builtin_tasks(ckpt):
    import lm_eval

    out = lm_eval.simple_evaluate(model="fixedid", model_args=f"pretrained={ckpt.ckpt_dir}",
                                  tasks=["fixedid_ioi", "fixedid_lastword"], limit=8,
                                  task_manager=task_manager(),  # first use of the adapter: registers "fixedid"
                                  verbosity="ERROR")
    assert 0 <= out["results"]["fixedid_ioi"]["acc,none"] <= 1
    assert out["results"]["fixedid_lastword"]["perplexity,none"] > 1
    with pytest.raises(AnalysisError, match="unknown model_args"):
        FixedIdEvalLM(pretrained=str(ckpt.ckpt_dir), colour="red")


def test_evaluate_table_skips_lm_evals_environment_report_and_restores_it(ckpt, monkeypatch):
    """The table keeps no environment report, so torch's collect_env (subprocesses, ~1.5 s a call) is not run for
    it; lm-eval's own simple_evaluate, called directly afterwards, still collects it."""
    import lm_eval
    import lm_eval.evaluator
    import torch.utils.collect_env

    from analysis.evaluation.lmeval import evaluate_table

    calls = []
    monkeypatch.setattr(torch.utils.collect_env, "get_pretty_env_info", lambda: calls.append(1) or "env")
    original = lm_eval.evaluator.add_env_info
    df = evaluate_table(ckpt.ckpt_dir, ["fixedid_ioi"], limit=4)
    assert calls == [] and lm_eval.evaluator.add_env_info is original
    assert set(df.task) == {"fixedid_ioi"} and df.value.between(0, 1).all()
    out = lm_eval.simple_evaluate(model="fixedid", model_args=f"pretrained={ckpt.ckpt_dir}", tasks=["fixedid_ioi"],
                                  limit=4, task_manager=task_manager(), verbosity="ERROR")
    assert calls == [1] and out["pretty_env_info"] == "env"


def test_the_task_index_leaves_lm_evals_own_tasks_out_when_asked_and_sees_an_edited_include_path(tmp_path):
    own = task_manager(defaults=False)
    assert set(BUILTIN_TASKS) <= set(own.all_tasks) and "hellaswag" not in own.all_tasks
    assert task_manager(defaults=False) is own  # kept for the process
    assert "hellaswag" in task_manager().all_tasks and set(BUILTIN_TASKS) <= set(task_manager().all_tasks)
    yaml = "task: {name}\ndataset_path: json\ntest_split: train\noutput_type: loglikelihood\n"
    (tmp_path / "mine.yaml").write_text(yaml.format(name="my_task"))
    first = task_manager(tmp_path, defaults=False)
    assert "my_task" in first.all_tasks and "my_other_task" not in first.all_tasks
    (tmp_path / "other.yaml").write_text(yaml.format(name="my_other_task"))
    second = task_manager(tmp_path, defaults=False)  # a new file under the path: a new index
    assert second is not first and {"my_task", "my_other_task"} <= set(second.all_tasks)


def test_shipped_task_data_is_what_the_generator_writes():
    for task in BUILTIN_TASKS:
        shipped = [json.loads(line) for line in (TASKS_DIR / f"{task}.jsonl").read_text().splitlines()]
        assert shipped == task_docs(task) and len(shipped) == 200
    mc = task_docs("fixedid_ioi")
    assert {d["label"] for d in mc} == {0, 1}  # the answer's place varies
    assert all(d["text"].split(" ")[-1] in d["text"].split(" ")[:-1] for d in task_docs("fixedid_lastword"))


def test_eval_cli_writes_tidy_csv_and_refuses_bad_input(ckpt, tmp_path, capsys):
    from analysis.cli.main import main

    out = tmp_path / "eval"
    with pytest.raises(SystemExit) as e:
        main(["eval", "--ckpt", str(ckpt.ckpt_dir), "--tasks", "fixedid_agreement", "--limit", "6",
              "--out", str(out)])
    assert e.value.code == 0
    df = pd.read_csv(out / "eval.csv")
    assert list(df[["variant", "task", "metric"]].iloc[0]) == ["canonical", "fixedid_agreement", "acc"]
    assert (out / "eval.png").exists() and (out / "eval.pdf").exists()
    assert df.n.iloc[0] == 6 and "fixedid_agreement" in json.loads((out / "eval.json").read_text())["canonical"][
        "results"]
    capsys.readouterr()
    for i, args in enumerate([["--tasks", "no_such_task"], ["--tasks", " , "], ["--limit", "0"]]):
        with pytest.raises(SystemExit) as e:
            main(["eval", "--ckpt", str(ckpt.ckpt_dir), *args, "--out", str(tmp_path / f"bad{i}")])
        assert e.value.code == 2 and not (tmp_path / f"bad{i}").exists()
        assert len(capsys.readouterr().err.strip().splitlines()) == 1


def test_lm_eval_command_line_finds_the_model(ckpt, capsys):
    import sys

    from analysis.cli.lm_eval import main

    before = list(sys.argv)
    main(["run", "--model", "fixedid", "--model_args", f"pretrained={ckpt.ckpt_dir}", "--tasks", "fixedid_facts",
          "--limit", "4", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "fixedid_facts" in out and "acc" in out
    assert sys.argv == before  # lm-eval's command reads sys.argv; the wrapper gives it back
    with pytest.raises(SystemExit) as e:  # a bad fixedid model_arg: one line, exit 2
        main(["run", "--model", "fixedid", "--model_args", f"pretrained={ckpt.ckpt_dir},max_batch_tokens=0",
              "--tasks", "fixedid_facts", "--limit", "4", "--device", "cpu"])
    err = capsys.readouterr().err.strip().splitlines()
    assert e.value.code == 2 and err[-1] == "lm_eval: error: max_batch_tokens must be positive, got 0"
    assert sys.argv == before


def test_eval_refuses_a_checkpoint_without_a_tokenizer(tmp_path, capsys):
    from analysis.cli.main import main
    from fixedid import FixedIdLM, ModelConfig, save_checkpoint

    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=32, n_layers=1, n_heads=2, d_ff=32, context=16)
    path = save_checkpoint(FixedIdLM(cfg), tmp_path / "bare")
    with pytest.raises(SystemExit) as e:
        main(["eval", "--ckpt", str(path), "--tasks", "fixedid_ioi", "--out", str(tmp_path / "out")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "no tokenizer" in err and "\n" not in err and not (tmp_path / "out").exists()


def test_evaluate_table_bootstraps_in_process_and_restores_the_environment(ckpt, monkeypatch):
    """lm-eval bootstraps perplexity's standard error in a pool of forked processes unless DISABLE_MULTIPROC is set;
    forked from a process with other threads, a pool worker can hang on an inherited lock (a study's evaluation did,
    for half an hour). The table forks no pool, still gets the standard error, and leaves the variable as it was."""
    import multiprocessing
    import os

    from analysis.evaluation.lmeval import evaluate_table

    def no_pool(*a, **k):
        raise AssertionError("lm-eval forked a multiprocessing pool")

    monkeypatch.setattr(multiprocessing, "Pool", no_pool)
    monkeypatch.delenv("DISABLE_MULTIPROC", raising=False)
    df = evaluate_table(ckpt.ckpt_dir, ["fixedid_lastword"], limit=8)
    assert "DISABLE_MULTIPROC" not in os.environ
    ppl = df[df.metric == "perplexity"]
    assert len(ppl) == 1 and ppl.value.iloc[0] > 1
    stderr = df.attrs["lm_eval"]["results"]["fixedid_lastword"]["perplexity_stderr,none"]
    assert isinstance(stderr, float) and stderr > 0
    monkeypatch.setenv("DISABLE_MULTIPROC", "yes")
    evaluate_table(ckpt.ckpt_dir, ["fixedid_lastword"], limit=8)
    assert os.environ["DISABLE_MULTIPROC"] == "yes"


def test_no_bootstrap_leaves_the_values_and_drops_the_stderr(ckpt):
    """``bootstrap_iters=0`` (what the study asks: it reads values only): the same values and no standard errors,
    where the default gives every metric one (accuracy's in closed form, perplexity's by the bootstrap); a negative
    count is refused."""
    from analysis.evaluation.lmeval import evaluate_table

    tasks = ["fixedid_lastword", "fixedid_facts"]
    full, none = (evaluate_table(ckpt.ckpt_dir, tasks, limit=8, bootstrap_iters=b) for b in (100_000, 0))
    assert full[["task", "metric", "value"]].equals(none[["task", "metric", "value"]])
    assert none.stderr.isna().all() and full.stderr.notna().all()
    assert {("fixedid_lastword", "perplexity"), ("fixedid_facts", "acc")} <= set(zip(full.task, full.metric))
    with pytest.raises(AnalysisError, match="bootstrap_iters"):
        evaluate_table(ckpt.ckpt_dir, tasks, limit=8, bootstrap_iters=-1)

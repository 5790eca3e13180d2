"""Attribution graphs against answers computed apart from them: the real model's logits, every target's incoming
edges plus its constant summing to its input, steering a node in the replacement moving each target by the edge's
prediction (the replacement is affine, so first order is exact), a hand-made graph's influence and scores by hand,
and the graph verb end to end."""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.causal.attribution_graph import (_clean, _replacement, attribution_graph, input_influence,
                                               logit_shares)
from analysis.causal.graph_influence import graph_scores, influence, normalize_rows, prune
from analysis.cli.main import main as analyze
from analysis.errors import AnalysisError
from analysis.features import dictionary_config, split_windows, train_dictionary


@pytest.fixture(scope="module")
def model(tmp_path_factory, tokenizer):
    """One fixed-code checkpoint (the graph treats canonical and gf2 alike: one input node per code column)."""
    from tests._helpers import tiny_checkpoint

    return tiny_checkpoint(tmp_path_factory, tokenizer, "gf2")


@pytest.fixture(scope="module")
def transcoders(model):
    train, _ = split_windows(model, train_tokens=4096, eval_tokens=512)
    out = {}
    for L in range(model.cfg.n_layers):
        cfg = dictionary_config(model, hook=f"blocks.{L}.ln2.hook_normalized", kind="transcoder", expansion=2, k=4)
        out[L], _ = train_dictionary(model, cfg, train, batch_tokens=256, progress=False)
    return out


@pytest.fixture(scope="module")
def prompt(model):
    return split_windows(model, train_tokens=512, eval_tokens=512)[1][0, :10]


@pytest.fixture(scope="module")
def full(model, transcoders, prompt):
    return attribution_graph(model, prompt, transcoders, prune_graph=False, max_logits=3, desired_prob=1.0, batch=16)


def test_logit_nodes_are_the_real_logits_and_every_row_sums_to_its_input(model, prompt, full):
    with torch.no_grad():
        real = model(prompt[None])[0, -1]
    logits = full.nodes[full.nodes.kind == "logit"]
    assert len(logits) == 3
    np.testing.assert_allclose(logits.input, real[torch.tensor(logits.feature.to_list())].numpy(), rtol=1e-4, atol=1e-4)
    # the three most probable tokens, in order
    assert list(logits.feature) == real.argsort(descending=True)[:3].tolist()
    sums = full.edges.groupby("target").weight.sum()
    inputs = full.nodes.set_index("id").input.dropna()
    assert set(sums.index) == set(inputs.index)
    rel = (sums[inputs.index] - inputs).abs() / inputs.abs().clip(lower=1.0)
    assert rel.max() < 1e-3, rel.sort_values().tail()
    feats = full.nodes[full.nodes.kind == "feature"]
    assert len(feats) == full.attrs["n_features"] > 0 and (feats.activation > 0).all()
    n_in = (full.nodes.kind == "input").sum()
    assert n_in == len(prompt) * (model.cfg.n_bits if model.cfg.has_code else 1)


def test_steering_a_node_moves_every_target_by_its_edge(model, transcoders, prompt, full):
    """Scale one source node in the replacement by (1 + eps): each target moves by eps x its edge weight."""
    tcs = {L: d.eval() for L, d in transcoders.items()}
    embed, acts, errs, _, frozen = _clean(model, prompt, tcs)
    nodes = full.nodes.reset_index(drop=True)
    feats = nodes[nodes.kind == "feature"]
    source = feats[feats.layer == 0].iloc[0]  # a layer-0 feature reaches every later target
    targets = [("logit", model.cfg.n_layers, len(prompt) - 1, int(v)) for v in nodes[nodes.kind == "logit"].feature]
    later = feats[feats.layer > 0]
    targets += [("feature", int(r.layer), int(r.position), int(r.feature)) for r in later.head(5).itertuples()]
    ids = [f"L{t[3]}" if t[0] == "logit" else f"F{t[1]}:{t[2]}:{t[3]}" for t in targets]
    B = len(targets)

    def run(scale):
        a = [x[None].expand(B, -1, -1).clone() for x in acts]
        a[0][:, int(source.position), int(source.feature)] *= scale
        with torch.no_grad():
            return _replacement(model, prompt, tcs, frozen, embed[None].expand(B, -1, -1), a,
                                [x[None].expand(B, -1, -1) for x in errs], targets).double().numpy()

    eps = 0.5
    moved = run(1 + eps) - run(1.0)
    edge = full.edges.set_index(["source", "target"]).weight
    predicted = np.array([edge.get((source.id, t), 0.0) * eps for t in ids])
    np.testing.assert_allclose(moved, predicted, atol=1e-4 * max(1, np.abs(predicted).max()))
    assert np.abs(predicted).max() > 0


def test_influence_prune_and_scores_by_hand():
    # inputs 0, 1 -> feature 2 -> logit 4; error 3 -> logit 4; input 1 -> logit 4
    A = np.zeros((5, 5))
    A[2, 0], A[2, 1] = 3.0, -1.0
    A[4, 2], A[4, 3], A[4, 1] = 2.0, 1.0, 1.0
    kinds = np.array(["input", "input", "feature", "error", "logit"])
    w = np.array([0, 0, 0, 0, 1.0])
    norm = normalize_rows(A)
    np.testing.assert_allclose(norm[4], [0, 0.25, 0.5, 0.25, 0])
    inf = influence(norm, w)
    # feature 0.5; error 0.25; input 0: 0.5 * 0.75; input 1: 0.25 + 0.5 * 0.25
    np.testing.assert_allclose(inf, [0.375, 0.375, 0.5, 0.25, 0])
    s = graph_scores(A, w, kinds)
    assert s["replacement"] == pytest.approx(0.75 / (0.75 + 0.25))
    # completeness: node 4 has 0.25 of its input from the error; weights inf + w = [.375, .375, .5, .25, 1]
    assert s["completeness"] == pytest.approx(1 - 0.25 * 1.0 / 2.5)
    keep, edges, _ = prune(A, w, kinds, node_threshold=0.5, edge_threshold=1.0)
    assert keep[[0, 1, 4]].all() and edges[4, 2] and not edges[0, 4]
    with pytest.raises(AnalysisError, match="must be in"):
        prune(A, w, kinds, node_threshold=1.5)


def test_pruning_keeps_a_subgraph_and_the_shares_add_up(model, transcoders, prompt, full):
    g = attribution_graph(model, prompt, transcoders, max_logits=3, desired_prob=1.0, batch=16)
    assert g.scores == pytest.approx(full.scores)  # scores read the full graph either way
    assert 0 < g.nodes.kept.sum() < len(g.nodes) and g.edges.kept.sum() < len(g.edges)
    kept = set(g.nodes.id[g.nodes.kept])
    e = g.edges[g.edges.kept & (g.edges.source != "bias")]
    assert set(e.source) <= kept and set(e.target) <= kept
    assert 0 <= g.scores["replacement"] <= 1 and 0 <= g.scores["completeness"] <= 1
    shares = logit_shares(g)
    assert sum(v for k, v in shares.items() if k.startswith("direct_")) == pytest.approx(1)
    bits = input_influence(g)
    assert bits.share.sum() == pytest.approx(1) and len(bits) == (model.cfg.n_bits if model.cfg.has_code else 1)


def test_a_learned_table_has_one_input_node_per_position(learned):
    train, held = split_windows(learned, train_tokens=2048, eval_tokens=512)
    tcs = {L: train_dictionary(learned, dictionary_config(learned, hook=f"blocks.{L}.ln2.hook_normalized",
                                                          kind="transcoder", expansion=2, k=4),
                               train, batch_tokens=256, progress=False)[0] for L in range(learned.cfg.n_layers)}
    g = attribution_graph(learned, held[0, :8], tcs, prune_graph=False, max_logits=2, desired_prob=1.0)
    assert list(g.nodes.id[g.nodes.kind == "input"]) == [f"I{p}" for p in range(8)]
    sums = g.edges.groupby("target").weight.sum()
    inputs = g.nodes.set_index("id").input.dropna()
    assert ((sums[inputs.index] - inputs).abs() / inputs.abs().clip(lower=1.0)).max() < 1e-3


def test_bad_transcoders_are_refused(model, transcoders, prompt):
    with pytest.raises(AnalysisError, match="one transcoder per layer"):
        attribution_graph(model, prompt, {0: transcoders[0]})


def test_the_graph_verb_writes_tables_and_a_figure(model, tmp_path, capsys):
    out = tmp_path / "g"
    with pytest.raises(SystemExit) as e:
        analyze(["graph", "--ckpt", f"m={model.ckpt_dir}", "--task", "ioi", "--n-prompts", "1", "--tokens", "2048",
                 "--expansion", "2", "--k", "4", "--max-logits", "2", "--out", str(out)])
    assert e.value.code == 0, capsys.readouterr().err
    scores = pd.read_csv(out / "graph_scores.csv")
    assert len(scores) == 1 and scores.replacement.between(0, 1).all()
    nodes = pd.read_csv(out / "graph_nodes.csv")
    assert set(nodes.kind) == {"input", "feature", "error", "logit", "bias"}
    assert (out / "graph.png").stat().st_size > 5000 and (out / "graph_edges.csv").exists()
    assert (out / "m" / "transcoders" / "blocks.0.ln2.hook_normalized-transcoder-topk" / "cfg.json").exists()
    assert (out / "graphs" / "m-0.json").exists() and "graph-data" in (out / "graphs" / "m-0.html").read_text()


def test_the_graph_json_is_circuit_tracers_schema_and_the_page_renders_in_a_real_browser(model, transcoders, prompt,
                                                                                        tmp_path):
    import json
    import os
    import re
    import shutil
    import subprocess

    from analysis.causal.graph_export import feature_examples, graph_html, graph_json

    g = attribution_graph(model, prompt, transcoders, max_logits=3, desired_prob=1.0, batch=16)
    data = graph_json(g, slug="t", scan="fixedid-test", transcoders=["a", "b"])
    assert set(data) == {"metadata", "qParams", "nodes", "links"} and data["metadata"]["schema_version"] == 1
    ids = [n["node_id"] for n in data["nodes"]]
    assert len(ids) == len(set(ids)) == int(g.nodes.kept.sum()) - 1  # every kept node but the bias
    kinds = {n["feature_type"] for n in data["nodes"]}
    assert kinds <= {"embedding", "cross layer transcoder", "mlp reconstruction error", "logit"}
    for n in data["nodes"]:
        pattern = {"cross layer transcoder": r"\d+_\d+_\d+", "mlp reconstruction error": r"\d+_-1_\d+",
                   "embedding": r"E_\d+_\d+(_b\d+)?", "logit": rf"{model.cfg.n_layers + 1}_\d+_\d+"}
        assert re.fullmatch(pattern[n["feature_type"]], n["node_id"]), n
    assert {l["source"] for l in data["links"]} | {l["target"] for l in data["links"]} <= set(ids)
    kept = g.edges[g.edges.kept & (g.edges.source != "bias") & g.edges.source.isin(g.nodes.id[g.nodes.kept])
                   & g.edges.target.isin(g.nodes.id[g.nodes.kept])]
    assert len(data["links"]) == len(kept)
    assert sorted(l["weight"] for l in data["links"]) == pytest.approx(sorted(kept.weight))
    logits = [n for n in data["nodes"] if n["feature_type"] == "logit"]
    assert sum(n["is_target_logit"] for n in logits) == 1 and json.dumps(data)  # serialisable
    # top tokens of two kept features, by brute force over the activations
    held = split_windows(model, train_tokens=512, eval_tokens=1024)[1]
    feats = g.nodes[g.nodes.kept & (g.nodes.kind == "feature")].head(2)
    pairs = list(zip(feats.layer.astype(int), feats.feature.astype(int)))
    ex = feature_examples(model, transcoders, held, pairs, top=3)
    L, f = pairs[0]
    with torch.no_grad():
        acts = model.run_with_cache(held, names_filter=[f"blocks.{L}.ln2.hook_normalized"])[1]
        a = transcoders[L].encode(acts[f"blocks.{L}.ln2.hook_normalized"].reshape(-1, model.cfg.d_model))[:, f]
    assert [v for _, v in ex[(L, f)]] == pytest.approx(a.sort(descending=True).values[:len(ex[(L, f)])].tolist(),
                                                      rel=1e-5)
    page = tmp_path / "graph.html"
    page.write_text(graph_html(data, {f"{L}_{f}_0": ex[(L, f)]}))
    assert "<script src" not in page.read_text() and "https://" not in page.read_text()
    chromium = shutil.which("chromium") or shutil.which("chromium-browser")
    if chromium is None:
        if os.environ.get("FIXEDID_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium is required here (.ci/run installs Debian's chromium)")
        pytest.skip("no chromium on this machine (apt-get install chromium; .ci/run installs it)")
    flags = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking",
             f"--user-data-dir={tmp_path / 'profile'}", "--virtual-time-budget=5000", "--dump-dom"]
    dom = subprocess.run([chromium, *flags, page.as_uri()], capture_output=True, text=True, timeout=120).stdout
    assert f'data-rendered="{len(ids)}"' in dom
    assert dom.count('class="node"') == len(ids) and dom.count('class="edge"') == len(data["links"])
    assert all(f'data-node-id="{i}"' in dom for i in ids)


def test_a_hand_built_circuit_is_recovered():
    """One block whose head copies code column K of every position, averaged, onto column J of the last position,
    and an output row for token t that reads column J: the logit's input edges are column J at the last position
    (directly) and column K at every position (through the head), with weights computed here by hand, and nothing
    else (the MLP and the transcoder write nothing, so features and errors carry no weight)."""
    from fixedid import FixedIdLM, ModelConfig

    from analysis.features import DictionaryConfig, SparseDictionary

    n, d, J, K, t, a = 8, 32, 2, 5, 7, 0.5
    cfg = ModelConfig.preset("toy", vocab_size=64, d_model=d, n_layers=1, n_heads=1, d_ff=32, context=16,
                             interface="canonical", n_bits=n, bias=False)
    m = FixedIdLM(cfg).eval()
    cols = {j: [c for c in range(d) if c % n == j] for j in (J, K)}  # tiled code: column c carries code column c % n
    with torch.no_grad():
        for p in m.parameters():
            p.zero_()
        for norm in (m.blocks[0].ln1, m.blocks[0].ln2, m.ln_final):
            norm.w.fill_(1.0)
        for ck, cj in zip(cols[K], cols[J]):
            m.blocks[0].attn.v_proj.weight[ck, ck] = 1.0
            m.blocks[0].attn.o_proj.weight[cj, ck] = a
        m.unembed.weight[t, cols[J]] = 1.0
    tc = SparseDictionary(DictionaryConfig(kind="transcoder", arch="topk", d_in=d, d_out=d, d_sae=16, k=2,
                                           hook_name="blocks.0.ln2.hook_normalized",
                                           hook_name_out="blocks.0.hook_mlp_out"))
    with torch.no_grad():
        tc.W_dec.zero_()
        tc.b_dec.zero_()
    ids = torch.tensor([3, 10, 17, 33, 40, 36])
    g = attribution_graph(m, ids, {0: tc}, prune_graph=False, max_logits=64, desired_prob=1.0)
    # by hand: the code rows (+-1, column j is bit n-1-j of the id), RMS scales, the head's uniform pattern
    eps = m.blocks[0].ln1.eps
    code = np.array([[1.0 if (i >> (n - 1 - j)) & 1 else -1.0 for j in range(n)] for i in ids.tolist()])
    e = code[:, np.arange(d) % n]
    s1 = np.sqrt((e ** 2).mean(1) + eps)
    x_last = e[-1].copy()
    x_last[cols[J]] += a * (e[:, cols[K]] / s1[:, None]).mean(0)
    s_f = np.sqrt((x_last ** 2).mean() + eps)
    expected = {f"I{len(ids) - 1}:b{J}": e[-1, cols[J]].sum() / s_f}
    for p in range(len(ids)):
        expected[f"I{p}:b{K}"] = a / len(ids) * e[p, cols[K]].sum() / (s1[p] * s_f)
    into = g.edges[(g.edges.target == f"L{t}") & (g.edges.source != "bias")].set_index("source").weight
    assert set(into.index) == set(expected), into
    np.testing.assert_allclose(into[list(expected)].to_numpy(), list(expected.values()), rtol=1e-4, atol=1e-6)
    logit = g.nodes.set_index("id").loc[f"L{t}", "input"]
    assert logit == pytest.approx(x_last[cols[J]].sum() / s_f, rel=1e-4)


def test_steering_the_strongest_feature_moves_the_real_logit_the_way_its_edge_says(model, transcoders, prompt, full):
    """In the real model (nothing frozen), adding a tenth of a feature's decoder write at its position moves the top
    logit in the direction of the feature's edge into it, for the two last-layer features at the last position with
    the strongest edges (their only path to the logit is the direct one; the size differs, as the final norm's scale,
    frozen in the graph, moves in the real model)."""
    top_logit = full.nodes[full.nodes.kind == "logit"].iloc[0]
    last = f"F{model.cfg.n_layers - 1}:{len(prompt) - 1}:"
    into = full.edges[(full.edges.target == top_logit.id) & full.edges.source.str.startswith(last)]
    strongest = into.reindex(into.weight.abs().sort_values(ascending=False).index).head(2)
    nodes = full.nodes.set_index("id")
    with torch.no_grad():
        base = model(prompt[None])[0, -1, int(top_logit.feature)]
        for src, w in zip(strongest.source, strongest.weight):
            n = nodes.loc[src]
            write = 0.1 * n.activation * transcoders[int(n.layer)].W_dec[int(n.feature)]

            def add(t, hook, p=int(n.position), write=write):
                t = t.clone()
                t[:, p] += write.to(t.dtype)
                return t

            moved = model.run_with_hooks(prompt[None], fwd_hooks=[(f"blocks.{int(n.layer)}.hook_mlp_out", add)])
            change = float(moved[0, -1, int(top_logit.feature)] - base)
            assert np.sign(change) == np.sign(w), (src, w, change)
    assert len(strongest) == 2

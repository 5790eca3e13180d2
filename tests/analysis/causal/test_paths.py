"""Path patching: exact against a naive hooked implementation written here (one full forward per sender, the
receiving layers' attention re-implemented head by head with its own q/k/v inputs), against TransformerLens 4.3's
``get_act_patch_direct_path`` on a bridge with per-head q/k/v forks, and into the logits with a frozen final norm
against direct logit attribution (ours and TransformerLens's)."""

import math
import warnings

import numpy as np
import pytest
import torch
import torch.nn.functional as F
import transformer_lens.patching as tlp
from transformer_lens.tools.analysis import direct_logit_attribution as tl_dla

from analysis import AnalysisError, AnalysisWarning, make_pairs
from analysis.causal.dla import direct_logit_attribution
from analysis.causal.paths import path_patching
from analysis.engine.metrics import logit_diff
from analysis.interop.split_bridge import to_split_qkv_bridge

from tests.analysis.causal._circuits import PAIRS, circuit_model, folded_twin


@pytest.fixture(scope="module", params=["rms", "ln_bias", "gqa", "rope_heads"])
def model(request, tmp_path_factory):
    return circuit_model(tmp_path_factory, request.param)


@pytest.fixture(scope="module")
def batch(model):
    return make_pairs(model, PAIRS)


# ------------------------------------------------------------------------------------- the naive reference
def ref_norm(mod, x):
    if hasattr(mod, "b"):
        return F.layer_norm(x, (x.shape[-1],), mod.w, mod.b, mod.eps)
    return F.rms_norm(x, (x.shape[-1],), mod.w, mod.eps)


def norm_in(mod, x, delta, norm):
    """The receiver's normed input when ``delta`` is added to its stream ``x``."""
    if norm == "recompute":
        return ref_norm(mod, x + delta)
    if hasattr(mod, "b"):
        scale = (x.var(-1, unbiased=False, keepdim=True) + mod.eps).sqrt()
        delta = delta - delta.mean(-1, keepdim=True)
    else:
        scale = (x.pow(2).mean(-1, keepdim=True) + mod.eps).sqrt()
    return ref_norm(mod, x) + delta / scale * mod.w


def rope(x, cos, sin):
    half = x.shape[-1] // 2
    return x * cos + torch.cat([-x[..., half:], x[..., :half]], -1) * sin


def attention(model, layer, x, delta, inputs, norm):
    """Layer ``layer``'s attention output on stream ``x``, head by head: the (component, head) pairs in ``inputs``
    read ``norm(x + delta)``, every other projection ``norm(x)``."""
    attn, ln1 = model.blocks[layer].attn, model.blocks[layer].ln1
    H, K, dh, T = attn.n_heads, attn.n_kv, attn.d_head, x.shape[1]
    plain, patched = ref_norm(ln1, x), norm_in(ln1, x, delta, norm)

    def proj(c, h):
        lin = getattr(attn, f"{c}_proj")
        rows = slice(h * dh, (h + 1) * dh)
        return F.linear(patched if (c, h) in inputs else plain, lin.weight[rows],
                        None if lin.bias is None else lin.bias[rows])

    causal = torch.ones(T, T, dtype=torch.bool).triu(1)
    out = 0
    for h in range(H):
        kv = h // (H // K)
        row = h if model.rope_cos.shape[1] > 1 else 0  # a table per head (rope_head_thetas) or one for all
        cos, sin = model.rope_cos[:T, row], model.rope_sin[:T, row]
        q, k, v = rope(proj("q", h), cos, sin), rope(proj("k", kv), cos, sin), proj("v", kv)
        scores = (q @ k.transpose(-1, -2) / math.sqrt(dh)).masked_fill(causal, float("-inf"))
        out = out + (scores.softmax(-1) @ v) @ attn.o_proj.weight[:, h * dh:(h + 1) * dh].T
    return out if attn.o_proj.bias is None else out + attn.o_proj.bias


def write(model, cache, sender):
    if sender == "embed":
        return cache["hook_embed"]
    layer = int(sender[1])
    if sender.endswith(".mlp"):
        return cache[f"blocks.{layer}.hook_mlp_out"]
    h, dh = int(sender[3]), model.cfg.d_head
    W_O = model.blocks[layer].attn.o_proj.weight[:, h * dh:(h + 1) * dh]
    return cache[f"blocks.{layer}.attn.hook_z"][:, :, h] @ W_O.T


def naive_path(model, batch, sender, receivers, mode, norm):
    """Per-pair logit difference with ``sender``'s source-minus-base write added to ``receivers`` only:
    ``("q"|"k"|"v", layer, head)``, ``("mlp", layer)``, ``("logits",)``. One full hooked forward of the base prompt."""
    src_tok, base_tok = (batch.clean, batch.corrupt) if mode == "denoise" else (batch.corrupt, batch.clean)
    with torch.no_grad():
        _, src = model.run_with_cache(src_tok)
        _, base = model.run_with_cache(base_tok)
        delta = write(model, src, sender) - write(model, base, sender)
        live, hooks = {}, []

        def keep(key):
            return lambda act, hook: live.__setitem__(key, act)

        for layer in sorted({r[1] for r in receivers if r[0] in "qkv"}):
            inputs = {(r[0], r[2]) for r in receivers if r[0] in "qkv" and r[1] == layer}
            hooks += [(f"blocks.{layer}.hook_resid_pre", keep(("pre", layer))),
                      (f"blocks.{layer}.hook_attn_out",
                       lambda act, hook, layer=layer, inputs=inputs:
                       attention(model, layer, live[("pre", layer)], delta, inputs, norm))]
        for layer in sorted({r[1] for r in receivers if r[0] == "mlp"}):
            blk = model.blocks[layer]
            hooks += [(f"blocks.{layer}.hook_resid_mid", keep(("mid", layer))),
                      (f"blocks.{layer}.hook_mlp_out",
                       lambda act, hook, blk=blk, layer=layer: blk.mlp(norm_in(blk.ln2, live[("mid", layer)], delta,
                                                                              norm)))]
        hooks.append((f"blocks.{model.cfg.n_layers - 1}.hook_resid_post", keep("final")))
        logits = model.run_with_hooks(base_tok, fwd_hooks=hooks)
        if ("logits",) in receivers:
            logits = model.unembed(norm_in(model.ln_final, live["final"], delta, norm))
    return logit_diff(logits, batch.answer, batch.wrong).double().numpy()


def own_ld(model, batch, tokens):
    with torch.no_grad():
        return logit_diff(model(tokens), batch.answer, batch.wrong).double().numpy()


def label(r):
    return "logits" if r[0] == "logits" else f"L{r[1]}.mlp" if r[0] == "mlp" else f"L{r[1]}H{r[2]}.{r[0]}"


CASES = [(["embed", "L0H1", "L0.mlp"], [("q", 1, 0), ("k", 2, 3)]),
         (["L0H2", "L1H3"], [("mlp", 1), ("v", 2, 1), ("logits",)]),
         (["L1.mlp", "L1H0", "L0H3"], [("logits",)]),
         (["embed"], [("q", 0, 2), ("k", 0, 2), ("v", 0, 2), ("mlp", 0)])]


@pytest.mark.parametrize("mode", ["denoise", "noise"])
@pytest.mark.parametrize("norm", ["recompute", "frozen"])
def test_exact_against_a_naive_hooked_loop(model, batch, mode, norm):
    worst = 0.0
    for senders, receivers in CASES:
        if model.cfg.kv_heads != model.cfg.n_heads:  # a key or value is shared by heads: only queries are paths
            receivers = [("q", *r[1:]) if r[0] in "kv" else r for r in receivers]
        df = path_patching(model, batch, senders, ",".join(map(label, receivers)), mode, norm=norm, per_pair=True,
                           max_batch=6, metric="logit_diff")  # two senders per forward
        for s in senders:
            ours = df[df.sender == s].value.to_numpy()
            worst = max(worst, float(np.abs(ours - naive_path(model, batch, s, receivers, mode, norm)).max()))
    assert worst < 2e-5, worst


def test_equals_transformer_lens_direct_path_patching(model, batch, monkeypatch):
    monkeypatch.setattr(tlp, "tqdm", lambda it, **kw: it)
    if model.cfg.rope_head_thetas is not None:  # TL's attention has one RoPE table for every head
        with pytest.raises(AnalysisError, match="one RoPE table"):
            to_split_qkv_bridge(model)
        return
    bridge = to_split_qkv_bridge(model).eval()
    with torch.no_grad():
        _, clean = bridge.run_with_cache(batch.clean)
        _, corrupt = bridge.run_with_cache(batch.corrupt)

    def metric(logits):
        return logit_diff(logits, batch.answer, batch.wrong).mean()

    worst, L, H = 0.0, model.cfg.n_layers, model.cfg.n_heads
    for c in "qkv" if model.cfg.kv_heads == model.cfg.n_heads else "q":
        ref = tlp.get_act_patch_direct_path_all_sources(bridge, batch.corrupt, clean, corrupt, metric, c,
                                                        verbose=False)
        for layer in range(1, L):
            for h in range(H):
                df = path_patching(model, batch, "heads", f"L{layer}H{h}.{c}", metric="logit_diff")
                got = ref[df.layer.to_numpy(int), df["head"].to_numpy(int), layer, h].numpy()
                worst = max(worst, float(np.abs(df.value.to_numpy() - got).max()))
    print(f"max |ours - TL get_act_patch_direct_path| = {worst:.2e}")
    assert worst < 1e-5


def test_into_the_logits_with_a_frozen_norm_is_the_difference_of_direct_logit_attributions(model, batch):
    frozen = path_patching(model, batch, "all", "logits", norm="frozen", per_pair=True, metric="logit_diff")
    base = direct_logit_attribution(model, batch, prompt="corrupt", per_pair=True)
    src = direct_logit_attribution(model, batch, prompt="clean", per_pair=True)
    base_ld = own_ld(model, batch, batch.corrupt)
    with torch.no_grad():  # the final norm's scale of each run: DLA divides by its own run's, the path by the base's
        scale = [model.run_with_cache(t)[1]["ln_final.hook_scale"][:, -1, 0].double().numpy()
                 for t in (batch.clean, batch.corrupt)]
    ratio = scale[0] / scale[1]

    def dla(df, lbl):
        return df[(df.label == lbl) & df["pos"].isna()].value.to_numpy()

    worst = 0.0
    for s in frozen.sender.unique():
        expect = base_ld + dla(src, s) * ratio - dla(base, s)
        worst = max(worst, float(np.abs(frozen[frozen.sender == s].value.to_numpy() - expect).max()))
    assert worst < 1e-4
    # TransformerLens's DLA of each run (on the twin with the final norm's weight folded): the same numbers for heads
    bridge = folded_twin(model).to_transformer_lens().eval()
    with torch.no_grad():
        runs = [bridge.run_with_cache(t)[1] for t in (batch.clean, batch.corrupt)]
    tl = [tl_dla(None, answer_tokens=batch.answer, incorrect_tokens=batch.wrong, unit="head", cache=c)
          for c in runs]
    heads = frozen[frozen.kind == "head"]
    for lbl, a, b in zip(tl[0].labels, tl[0].attribution.detach(), tl[1].attribution.detach()):
        if lbl != "remainder":
            got = heads[heads.sender == lbl].value.to_numpy()
            expect = base_ld + a.double().numpy() * ratio - b.double().numpy()
            worst = max(worst, float(np.abs(got - expect).max()))
    print(f"max |frozen path into logits - (base + TL DLA difference)| = {worst:.2e}")
    assert worst < 1e-4
    # the convention matters: recomputing the final norm's scale moves the numbers
    recompute = path_patching(model, batch, "all", "logits", per_pair=True, metric="logit_diff")
    assert float(np.abs(recompute.value - frozen.value).max()) > 1e-3


def test_frame_no_ops_normalisation_and_callable_metrics(model, batch):
    df = path_patching(model, batch, receivers="L2H1.q,logits", metric="logit_diff")
    assert list(df.columns) == ["sender", "kind", "layer", "head", "receivers", "value", "value_lo", "value_hi", "n"]
    assert df.sender.tolist() == ["embed"] + [s for i in range(2) for s in [f"L{i}H{h}" for h in range(4)] +
                                              [f"L{i}.mlp"]]  # every sender upstream of L2, in forward order
    a = df.attrs
    assert a["baseline"] == a["corrupt"] and a["receivers"] == ["L2H1.q", "logits"] and a["norm"] == "recompute"
    # the prompts differ at one position before the last: the input writes nothing new at the final position, so
    # its direct path into the logits is an exact no-op
    assert (path_patching(model, batch, "embed", "logits", metric="logit_diff").value == a["corrupt"]).all()
    custom = path_patching(model, batch, receivers="L2H1.q,logits",  # a callable reads every position
                           metric=lambda logits, ans, wr: logit_diff(logits, ans, wr))
    assert np.allclose(custom.value, df.value, atol=1e-5)
    per = path_patching(model, batch, "L0H*", "L1.mlp", per_pair=True, metric="logit_diff")
    clean, corrupt = own_ld(model, batch, batch.clean), own_ld(model, batch, batch.corrupt)
    gap = clean - corrupt
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", AnalysisWarning)
        normed = path_patching(model, batch, "L0H*", "L1.mlp", metric="normalized_logit_diff", per_pair=True)
        summary = path_patching(model, batch, "L0H*", "L1.mlp", metric="normalized_logit_diff")
    assert bool(caught) == bool((np.abs(gap) < 0.25).any() or abs(gap.mean()) < 0.25)
    expect = (per.value.to_numpy().reshape(4, -1) - corrupt) / gap
    expect[:, np.abs(gap) < 0.25] = np.nan
    assert np.allclose(normed.value.to_numpy().reshape(4, -1), expect, equal_nan=True, atol=1e-6)
    mean = (per.value.to_numpy().reshape(4, -1).mean(1) - corrupt.mean()) / gap.mean()
    # float32 logit differences (~1e-7 relative) divided by a mean gap of 0.04-0.5: 1e-6 was measured exceeded (1.6e-6,
    # the gqa model on one machine), so the float32 bound scaled by 1 / gap, 1e-5
    assert np.allclose(summary.value, mean, atol=1e-5) and summary.attrs["clean"] == 1.0
    assert (summary.value_lo <= summary.value).all() and (summary.value <= summary.value_hi).all()


def test_bad_input(model, batch):
    for receivers, message in [("L1H2.x", "unknown receiver"), ("L9H0.q", "layer 9 is out of range"),
                               ("L1H9.q", "head 9 is out of range"), ("", "no receivers given"),
                               ("L0H0.q", "no sender of the set 'heads' lies upstream")]:
        with pytest.raises(AnalysisError, match=message):
            path_patching(model, batch, "heads", receivers, metric="logit_diff")
    with pytest.raises(AnalysisError, match="sender L2H0 does not reach receiver"):
        path_patching(model, batch, "L2H0", "L1H0.q", metric="logit_diff")
    with pytest.raises(AnalysisError, match="sender L1.mlp does not reach receiver"):
        path_patching(model, batch, "L1.mlp", "L1.mlp", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown sender"):
        path_patching(model, batch, "L0.attn", "logits", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown mode"):
        path_patching(model, batch, mode="both", metric="logit_diff")
    with pytest.raises(AnalysisError, match="unknown norm convention"):
        path_patching(model, batch, norm="none", metric="logit_diff")
    if model.cfg.kv_heads != model.cfg.n_heads:
        with pytest.raises(AnalysisError, match="shares keys and values"):
            path_patching(model, batch, "L0H0", "L1H1.k", metric="logit_diff")

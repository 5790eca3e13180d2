"""The output side: the logit lens against a hand-computed lens, head geometry on heads built to known answers, and
their command lines."""

import numpy as np
import pandas as pd
import pytest
import torch

from analysis.readouts.head import head_geometry
from analysis.readouts.lens import logit_lens
from fixedid.codes import ids_to_bits

from tests._helpers import tiny_checkpoint


@pytest.fixture(scope="module")
def other(tmp_path_factory, tokenizer):
    """A learned reference of another run (seed 4; the module's models are seed 3)."""
    return tiny_checkpoint(tmp_path_factory, tokenizer, "learned", seed=4)


def test_logit_lens_matches_a_hand_computed_lens(model):
    x = torch.randint(0, model.cfg.vocab_size, (6, 20), generator=torch.Generator().manual_seed(0))
    df = logit_lens(model, x)
    assert len(df) == model.cfg.n_layers + 1 and list(df.depth) == list(range(len(df)))
    with torch.no_grad():
        logits, cache = model.run_with_cache(x)
        lp = torch.log_softmax(logits[:, :-1], -1)
        last = df.iloc[-1]
        assert abs(last.kl) < 1e-5 and abs(last.accuracy - (lp.argmax(-1) == x[:, 1:]).float().mean()) < 1e-6
        mid = torch.log_softmax(model.unembed(model.ln_final(cache["blocks.1.hook_resid_pre"]))[:, :-1], -1)
        kl = (lp.exp() * (lp - mid)).sum(-1).mean(1).mean()
        loss = -mid.gather(-1, x[:, 1:, None])[..., 0].mean(1).mean()
    row = df.set_index("hook").loc["blocks.1.hook_resid_pre"]
    assert abs(row.kl - float(kl)) < 1e-4 and abs(row.loss - float(loss)) < 1e-4
    assert row.kl_lo <= row.kl <= row.kl_hi


def test_head_geometry_on_known_heads(model, other):
    V, d = model.cfg.vocab_size, model.cfg.d_model
    bits = ids_to_bits(np.arange(V), model.cfg.n_bits).astype(np.float32)
    M = np.random.default_rng(0).normal(size=(bits.shape[1], d)).astype(np.float32)
    with torch.no_grad():
        saved = model.unembed.weight.clone(), other.embed.W_E.clone()
        model.unembed.weight.copy_(torch.from_numpy(bits @ M))  # head rows: a linear function of the id's bits
        other.embed.W_E.copy_(model.unembed.weight)  # the reference input table: the same rows
        try:
            df = head_geometry(model, other, alpha=1e-6, boot=100, null_draws=10).set_index(["measure", "basis"])
        finally:
            model.unembed.weight.copy_(saved[0])
            other.embed.W_E.copy_(saved[1])
    assert df.loc[("bits_r2", "canonical"), "value"] > 0.999
    own = df.loc[("bits_r2", "own code"), "value"]
    if model.cfg.interface == "canonical":
        assert own > 0.999
    else:  # the gf2 code is a GF(2)-linear recoding: the canonical bits are not a real-linear function of it
        assert own < 0.9
    assert df.xs("cka_to_learned_input", level=0).value.iloc[0] > 0.999
    assert df.xs("debiased_cka_to_learned_input", level=0).value.iloc[0] > 0.999
    assert df.xs("nn_overlap", level=0).value.iloc[0] > 0.99


def test_lens_and_head_command_lines(model, learned, other, tmp_path, capsys):
    from analysis.cli.main import main

    dirs = [str(learned.ckpt_dir), str(model.ckpt_dir)]
    for verb, extra in (("lens", ["--tokens", "512"]), ("unembed", ["--reference", str(other.ckpt_dir)])):
        out = tmp_path / verb
        with pytest.raises(SystemExit) as e:
            main([verb, *sum((["--ckpt", d] for d in dirs), []), *extra, "--out", str(out)])
        assert e.value.code == 0 and (out / f"{verb}.png").exists() and (out / f"{verb}.pdf").exists()
        df = pd.read_csv(out / f"{verb}.csv")
        assert set(df.variant) == {"learned", model.cfg.interface}
    assert "cka_to_learned_input" in set(pd.read_csv(tmp_path / "unembed" / "unembed.csv").measure)
    capsys.readouterr()
    with pytest.raises(SystemExit) as e:
        main(["unembed", "--ckpt", dirs[1], "--reference", dirs[1], "--out", str(tmp_path / "bad")])
    err = capsys.readouterr().err.strip()
    assert e.value.code == 2 and "fixed-code checkpoint" in err and not (tmp_path / "bad").exists()


def test_the_tuned_lens_starts_as_the_logit_lens_and_reads_held_out_text_closer_to_the_output(model):
    from analysis.readouts.lens import lens_hooks, lens_table
    from analysis.readouts.lens_comparison import lens_comparison
    from analysis.readouts.tuned_lens import TunedLens

    x = torch.randint(0, model.cfg.vocab_size, (16, 24), generator=torch.Generator().manual_seed(1))
    unfitted = TunedLens(model.cfg.d_model, lens_hooks(model))
    pd.testing.assert_frame_equal(lens_table(model, x, unfitted), lens_table(model, x))  # zero translators
    flags = [p.requires_grad for p in model.parameters()]
    df = lens_comparison(model, tokens=4096, steps=60)  # the checkpoint's own validation text
    assert [p.requires_grad for p in model.parameters()] == flags and all(p.grad is None for p in model.parameters())
    kl = df.pivot(index="depth", columns="kind", values="kl")
    assert (kl.tuned.iloc[:-1] < kl.logit.iloc[:-1]).all()  # read on the half it was not fitted on
    assert abs(kl.tuned.iloc[-1]) < 1e-5 and abs(kl.logit.iloc[-1]) < 1e-5  # the model's own output: exact
    assert df.attrs["n_fit_tokens"] > 0 and df.attrs["n_tokens"] >= df.attrs["n_fit_tokens"]


def test_lens_command_line_with_the_tuned_lens(model, tmp_path):
    from analysis.cli.main import main

    out = tmp_path / "tuned"
    with pytest.raises(SystemExit) as e:
        main(["lens", "--kind", "tuned", "--kind", "jacobian", "--ckpt", str(model.ckpt_dir), "--tokens", "1024",
              "--lens-steps", "20", "--out", str(out)])
    assert e.value.code == 0 and (out / "lens.png").exists()
    df = pd.read_csv(out / "lens.csv")
    depths = model.cfg.n_layers + 1
    assert df.kind.value_counts().to_dict() == {"logit": depths, "tuned": depths, "jacobian": depths - 1}
    assert 0 not in set(df[df.kind == "jacobian"].depth)  # no Jacobian lens reads the input


def test_the_jacobian_lens_is_the_models_averaged_jacobian_to_its_last_block(model):
    """TransformerLens's fit through our bridge against the Jacobian computed here with autograd: block 0's output
    to the last block's output, effects on every later valid position summed, averaged over valid source
    positions (the first SKIP_FIRST_POSITIONS and the last left out); read at depth 1 through it."""
    from analysis.readouts.jacobian_lens import SKIP_FIRST_POSITIONS, fit_jacobian_lens, jacobian_translator

    x = torch.randint(0, model.cfg.vocab_size, (2, 12), generator=torch.Generator().manual_seed(2))
    lens = fit_jacobian_lens(model, x)
    L, d = model.cfg.n_layers, model.cfg.d_model
    valid = torch.arange(SKIP_FIRST_POSITIONS, x.shape[1] - 1)
    want = torch.zeros(d, d)
    for row in x:
        state = {}

        def leaf(mod, inp, out):
            state["h"] = out.detach().requires_grad_(True)
            return state["h"]

        hooks = [model.mod_dict["blocks.0.hook_resid_post"].register_forward_hook(leaf),
                 model.mod_dict[f"blocks.{L - 1}.hook_resid_post"].register_forward_hook(
                     lambda mod, inp, out: state.__setitem__("y", out))]
        try:
            with torch.enable_grad():
                model(row[None])
                for k in range(d):
                    g, = torch.autograd.grad(state["y"][0, valid, k].sum(), state["h"], retain_graph=True)
                    want[k] += g[0, valid].mean(0) / len(x)
        finally:
            for h in hooks:
                h.remove()
    assert torch.allclose(lens.jacobians[0], want, atol=1e-5, rtol=1e-4)
    h = torch.randn(3, d)
    assert torch.allclose(jacobian_translator(lens, L)(h, 1), h @ want.T, atol=1e-4)
    assert jacobian_translator(lens, L)(h, 0) is None and torch.equal(jacobian_translator(lens, L)(h, L), h)

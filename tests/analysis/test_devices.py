"""Every analysis runs where the model is: each one on the CPU, and where a GPU is available the same calls on CUDA
give the CPU's numbers (a tensor an analysis builds on the wrong device fails the CUDA run outright)."""

import pandas as pd
import pytest
import torch

from analysis import load
from analysis.causal.ablation import ablation
from analysis.causal.bitmap import bit_layer_map
from analysis.causal.context import context_curve
from analysis.causal.erasure import erasure
from analysis.causal.interventions import input_intervention
from analysis.causal.patching import activation_patching, attribution_patching
from analysis.causal.recoding import recoding_sweep
from analysis.evaluation.behaviours import pair_scores
from analysis.readouts.activations import collect
from analysis.readouts.head import head_geometry
from analysis.readouts.lens import logit_lens
from analysis.readouts.probes import probe_table
from analysis.readouts.similarity import cka_matrix
from analysis.tasks import task_pairs

from tests._helpers import tiny_checkpoint

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


@pytest.fixture(scope="module")
def paths(tmp_path_factory, tokenizer):
    # the learned reference is another run (seed 6): head geometry refuses a reference from the same run
    return {v: tiny_checkpoint(tmp_path_factory, tokenizer, v, seed=s).ckpt_dir
            for v, s in (("gf2", 5), ("learned", 6))}


def every_analysis(paths, device) -> dict[str, pd.DataFrame]:
    m, learned = load(paths["gf2"], device=device), load(paths["learned"], device=device)
    x = torch.randint(0, m.cfg.vocab_size, (4, 24), generator=torch.Generator().manual_seed(3))
    pairs = task_pairs(m, "ioi", 3).texts
    acts = collect(m, x, hooks=["hook_embed", "blocks.1.hook_resid_pre"])
    return {
        "patching": activation_patching(m, pairs, site="z"),
        "attribution": attribution_patching(m, pairs, site="resid_pre"),
        "bitflip": input_intervention(m, "bitflip", x, bits=[0, 3]).summary,
        "noise": input_intervention(m, "noise", x, scales=[0.5]).summary,
        "swap": input_intervention(m, "swap", x, pos=3).summary,
        "ablation": ablation(m, x, component="head", how="resample").summary,
        "bit_layer": bit_layer_map(m, x, pos=2, bits=[1]),
        "recoding": recoding_sweep(m, "transvection", ks=[1], draws=1, data=x, tasks=()),
        "lens": logit_lens(m, x),
        "head": head_geometry(m, learned),
        "context": context_curve(m, x, ks=(1, 2), positions=4),
        "erasure": erasure(m, "token", "blocks.1.hook_resid_pre", x, tasks=(), placebo_draws=1),
        "probes": probe_table(acts, ["canonical_bits", "token"], controls=False, shuffled=False),
        "similarity": cka_matrix(m, learned, x),
        "behaviours": pair_scores(m, n=4),
    }


@pytest.mark.parametrize("device", DEVICES)
def test_every_analysis_runs_on_the_models_device(paths, device):
    results = every_analysis(paths, device)
    assert all(isinstance(df, pd.DataFrame) and len(df) for df in results.values())
    if device == "cpu":
        return
    reference = every_analysis(paths, "cpu")
    for name, df in results.items():
        ref = reference[name]
        assert list(df.columns) == list(ref.columns), name
        numeric = df.select_dtypes("number").columns
        pd.testing.assert_frame_equal(df[numeric], ref[numeric], rtol=1e-3, atol=1e-4, check_dtype=False,
                                      obj=name)

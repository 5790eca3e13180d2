"""Step 1 of the SAELens comparison (run in the project's environment): train four small dictionaries on the demo's
canonical checkpoint and write them, the held-out activations they are compared on, and the toolkit's numbers.

    python experiments/validation/saelens/make_dictionaries.py      # needs the demo's checkpoints (fixedid-analyze demo)

Writes ``golden/<name>/`` (each dictionary in SAELens's layout), ``golden/activations.safetensors`` (the held-out
input and target activations, float32) and ``golden/toolkit.json`` (L0, FVU, dead fraction and a fingerprint of the
outputs, by the toolkit's own inference). Step 2, ``run_saelens.py``, reads the same files with SAELens.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import torch
from safetensors.torch import save_file

from analysis.features import dictionary_config, save_dictionary, split_windows, train_dictionary
from analysis.features.stream import model_activations
from analysis.loading import load

HERE = Path(__file__).parent / "golden"
#: (name, kind, arch, input hook): every SAELens architecture the toolkit writes that SAELens 6.54 has a class for
DICTIONARIES = [("sae-topk", "sae", "topk", "blocks.2.hook_resid_post"),
                ("sae-jumprelu", "sae", "jumprelu", "blocks.2.hook_resid_post"),
                ("sae-relu", "sae", "relu", "blocks.2.hook_resid_post"),
                ("sae-batchtopk", "sae", "batchtopk", "blocks.2.hook_resid_post"),
                ("transcoder-jumprelu", "transcoder", "jumprelu", "blocks.1.ln2.hook_normalized"),
                ("skip-transcoder-relu", "skip-transcoder", "relu", "blocks.1.ln2.hook_normalized")]


def fingerprint(t: torch.Tensor) -> dict:
    """Numbers that pin a tensor down without storing it: its sum, its squared sum and its first row."""
    return {"sum": float(t.double().sum()), "sq_sum": float(t.double().pow(2).sum()),
            "first_row": [float(v) for v in t[0]]}


@torch.no_grad()
def numbers(d, x: torch.Tensor, y: torch.Tensor) -> dict:
    acts = d.encode(x)
    out = d.decode(acts, x)
    fvu = float((out - y).double().pow(2).sum() / (y - y.mean(0)).double().pow(2).sum())
    return {"l0": float((acts > 0).sum(-1).double().mean()), "fvu": fvu,
            "dead_fraction": float(((acts > 0).sum(0) == 0).double().mean()), "output": fingerprint(out)}


def main(ckpt: str) -> None:
    model = load(ckpt)
    train, held = split_windows(model, train_tokens=65_536, eval_tokens=1024)
    hooks = sorted({h for *_, h in DICTIONARIES} | {"blocks.1.hook_mlp_out"})
    acts = dict(zip(hooks, model_activations(model, held, hooks)))
    HERE.mkdir(parents=True, exist_ok=True)
    save_file({h: a.contiguous() for h, a in acts.items()}, str(HERE / "activations.safetensors"))
    ours = {}
    for name, kind, arch, hook in DICTIONARIES:
        cfg = dictionary_config(model, hook=hook, kind=kind, arch=arch, expansion=4, k=16)
        d, _ = train_dictionary(model, cfg, train, batch_tokens=512, progress=False)
        save_dictionary(d, HERE / name, model_name="fixedid demo canonical (seed 0)")
        x = acts[hook]
        y = x if kind == "sae" else acts[cfg.hook_name_out]
        ours[name] = {"hook": hook, "hook_out": cfg.hook_name_out, **numbers(d, x, y)}
        print(name, {k: v for k, v in ours[name].items() if k != "output"})
    (HERE / "toolkit.json").write_text(json.dumps(ours, indent=1))


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else str(Path.home() / ".cache/fixedid/demo-436df3230d5a/canonical"))

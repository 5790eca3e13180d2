"""Step 2 of the SAELens comparison: read the dictionaries of ``make_dictionaries.py`` with SAELens's own loader and
inference, in a separate environment (SAELens 6.54 needs TransformerLens 3.9; the toolkit needs 4.3), and write
SAELens's numbers for the toolkit's test to compare with.

    python3.11 -m venv /tmp/saelens-venv
    /tmp/saelens-venv/bin/pip install -c constraints-cpu.txt torch
    /tmp/saelens-venv/bin/pip install "sae-lens==6.54.*" "transformer-lens==3.9.*"
    /tmp/saelens-venv/bin/python experiments/validation/saelens/run_saelens.py

Writes ``golden/saelens.json``: per dictionary, the SAELens class that loaded it, and L0, FVU, dead fraction and the
output's fingerprint computed from ``SAE.encode`` / ``SAE.decode`` (``forward`` for skip transcoders) on the held-out
activations. ``tests/analysis/features/test_saelens_golden.py`` checks the toolkit against these numbers.
"""

from __future__ import annotations

import json
from importlib.metadata import version
from pathlib import Path

import torch
from safetensors.torch import load_file

from sae_lens import SAE

HERE = Path(__file__).parent / "golden"


def fingerprint(t: torch.Tensor) -> dict:
    return {"sum": float(t.double().sum()), "sq_sum": float(t.double().pow(2).sum()),
            "first_row": [float(v) for v in t[0]]}


def main() -> None:
    acts = load_file(str(HERE / "activations.safetensors"))
    ours = json.loads((HERE / "toolkit.json").read_text())
    out = {"sae_lens": version("sae-lens"), "transformer_lens": version("transformer-lens"),
           "torch": torch.__version__, "dictionaries": {}}
    for name, entry in ours.items():
        sae = SAE.load_from_disk(str(HERE / name), device="cpu")
        sae.eval()
        x = acts[entry["hook"]]
        y = x if entry["hook_out"] is None else acts[entry["hook_out"]]
        with torch.no_grad():
            feats = sae.encode(x)
            recon = sae.forward(x) if hasattr(sae, "W_skip") else sae.decode(feats)
        fvu = float((recon - y).double().pow(2).sum() / (y - y.mean(0)).double().pow(2).sum())
        out["dictionaries"][name] = {
            "class": type(sae).__name__, "architecture": sae.cfg.architecture(),
            "hook_name": sae.cfg.metadata.hook_name, "l0": float((feats > 0).sum(-1).double().mean()), "fvu": fvu,
            "dead_fraction": float(((feats > 0).sum(0) == 0).double().mean()), "output": fingerprint(recon)}
        print(name, type(sae).__name__, {k: v for k, v in out["dictionaries"][name].items() if k != "output"})
    (HERE / "saelens.json").write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()

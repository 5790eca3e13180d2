"""An attribution graph written for viewers: circuit-tracer's graph JSON, and a self-contained offline HTML page."""

from __future__ import annotations

import html
import json

import numpy as np
import pandas as pd
import torch

from analysis.causal.attribution_graph import AttributionGraph
from analysis.engine import names as hooknames

#: The most edges the HTML view (:func:`graph_html`) draws, the strongest by ``|weight|``; the JSON keeps them all. An
#: unpruned graph can have millions, more than a browser draws as SVG; 20,000 make about 2 MB of page, drawn in a
#: second or two. The demo's pruned graphs (at most a few thousand edges) are drawn whole.
MAX_VIEW_EDGES = 20_000
#: The most nodes the HTML view draws: every input and logit node, then the others by influence, most first.
MAX_VIEW_NODES = 5_000


def _cumulative(influence: np.ndarray) -> np.ndarray:
    """Each node's cumulative share of the total influence when nodes are sorted by influence, largest first."""
    order = np.argsort(-influence, kind="stable")
    cum = np.cumsum(influence[order]) / max(influence.sum(), 1e-30)
    out = np.empty_like(cum)
    out[order] = cum
    return out


def graph_json(graph: AttributionGraph, *, slug: str, scan: str, transcoders: list[str] | None = None,
               node_threshold: float = 0.8) -> dict:
    """The kept part of ``graph`` in circuit-tracer's graph-file schema (module docstring)."""
    nodes = graph.nodes[graph.nodes.kind != "bias"].reset_index(drop=True)
    cum = _cumulative(nodes.influence.to_numpy())
    n_layers = int(nodes.layer.max())
    prompt = graph.attrs["prompt"]
    ids = graph.attrs.get("token_ids") or [0] * len(prompt)
    out, rename, seen_logit = [], {}, False
    for i, r in nodes.iterrows():
        if not r.kept:
            continue
        L, p, f = int(r.layer), int(r.position), int(r.feature)
        base = {"ctx_idx": p, "run_idx": 0, "reverse_ctx_idx": 0, "clerp": "", "token_prob": 0.0,
                "is_target_logit": False, "influence": float(cum[i]), "activation": float(r.activation)}
        if r.kind == "feature":
            nid = f"{L}_{f}_{p}"
            node = {**base, "node_id": nid, "feature": (L + f) * (L + f + 1) // 2 + f, "layer": str(L),
                    "feature_type": "cross layer transcoder", "jsNodeId": f"{L}_{f}-0"}
        elif r.kind == "error":
            nid = f"{L}_-1_{p}"
            node = {**base, "node_id": nid, "feature": -1, "layer": str(L), "feature_type": "mlp reconstruction error",
                    "jsNodeId": f"{L}_-1-{p}", "activation": None}
        elif r.kind == "input":
            nid = f"E_{ids[p]}_{p}" + (f"_b{f}" if f >= 0 else "")
            node = {**base, "node_id": nid, "feature": f if f >= 0 else p, "layer": "E", "feature_type": "embedding",
                    "jsNodeId": f"E_{ids[p]}-{p}" + (f"b{f}" if f >= 0 else ""), "activation": None}
        else:
            nid, first_logit = f"{n_layers + 1}_{f}_{p}", not seen_logit
            seen_logit = True
            node = {**base, "node_id": nid, "feature": f, "layer": str(n_layers + 1), "feature_type": "logit",
                    "jsNodeId": f"L_{f}-{p}", "token_prob": float(r.activation), "influence": None,
                    "activation": None, "is_target_logit": first_logit,
                    "clerp": f'Output "{r.token}" (p={float(r.activation):.3f})'}
        rename[r.id] = nid
        out.append(node)
    e = graph.edges[graph.edges.kept & graph.edges.source.isin(rename) & graph.edges.target.isin(rename)]
    links = [{"source": rename[s], "target": rename[t], "weight": float(w)}
             for s, t, w in zip(e.source, e.target, e.weight)]
    meta = {"slug": slug, "scan": scan, "transcoder_list": list(transcoders or []), "prompt_tokens": list(prompt),
            "prompt": "".join(prompt), "node_threshold": node_threshold, "schema_version": 1}
    qparams = {"pinnedIds": [], "supernodes": [], "linkType": "both", "clickedId": "", "sg_pos": ""}
    return {"metadata": meta, "qParams": qparams, "nodes": out, "links": links}


@torch.no_grad()
def feature_examples(model, transcoders: dict, windows: torch.Tensor, features, *, top: int = 5,
                     batch: int = 16) -> dict:
    """``{(layer, feature): [(token, activation), ...]}``: the ``top`` token occurrences of ``windows`` on which each
    of ``features`` (``(layer, feature)`` pairs) is most active, strongest first."""
    from analysis.features.stream import model_activations

    wanted: dict[int, list[int]] = {}
    for L, f in features:
        wanted.setdefault(int(L), []).append(int(f))
    best: dict = {k: [] for k in features}
    flat_ids = windows.reshape(-1)
    for L, feats in wanted.items():
        hook, acts = hooknames.mlp_in(L), []
        for i in range(0, windows.shape[0], batch):
            (a,) = model_activations(model, windows[i:i + batch], [hook])
            acts.append(transcoders[L].encode(a)[:, feats].cpu())
        acts = torch.cat(acts)
        vals, idx = acts.topk(min(top, acts.shape[0]), dim=0)
        for j, f in enumerate(feats):
            toks = model.to_str_tokens(flat_ids[idx[:, j]]) if getattr(model, "tokenizer", None) is not None else \
                [str(int(t)) for t in flat_ids[idx[:, j]]]
            best[(L, f)] = [(t, float(v)) for t, v in zip(toks, vals[:, j]) if v > 0]
    return best


_PAGE = """<!doctype html>
<html><head><meta charset="utf-8"><title>%(title)s</title>
<style>body{font:12px sans-serif;margin:12px} #tip{position:fixed;background:#fff;border:1px solid #999;padding:4px;
display:none;max-width:360px;white-space:pre-wrap} line{stroke-linecap:round}</style></head>
<body><h3>%(title)s</h3><p>%(subtitle)s</p>%(notice)s<svg id="graph"></svg><div id="tip"></div>
<script id="graph-data" type="application/json">%(data)s</script>
<script>
(function () {
  const g = JSON.parse(document.getElementById("graph-data").textContent);
  const svg = document.getElementById("graph"), tip = document.getElementById("tip"), NS = "http://www.w3.org/2000/svg";
  const toks = g.metadata.prompt_tokens, W = 90 * toks.length + 120;
  const layers = Array.from(new Set(g.nodes.map(n => n.layer)))
    .sort((a, b) => (a === "E" ? -1 : +a) - (b === "E" ? -1 : +b));
  const H = 110 * layers.length + 60; svg.setAttribute("width", W); svg.setAttribute("height", H);
  const cell = {}, pos = {};
  g.nodes.forEach(n => { const k = n.layer + ":" + n.ctx_idx; (cell[k] = cell[k] || []).push(n); });
  Object.values(cell).forEach(list => list.forEach((n, i) => {
    const x = 80 + 90 * n.ctx_idx + (list.length > 1 ? (i / (list.length - 1) - 0.5) * 70 : 0);
    const y = H - 60 - 110 * layers.indexOf(n.layer); pos[n.node_id] = [x, y]; }));
  let top = 1e-12;  // a loop: spreading 100k+ weights into Math.max would overflow the call stack
  g.links.forEach(l => { top = Math.max(top, Math.abs(l.weight)); });
  g.links.forEach(l => { const a = pos[l.source], b = pos[l.target]; if (!a || !b) return;
    const e = document.createElementNS(NS, "line"); const s = Math.abs(l.weight) / top;
    e.setAttribute("x1", a[0]); e.setAttribute("y1", a[1]); e.setAttribute("x2", b[0]); e.setAttribute("y2", b[1]);
    e.setAttribute("stroke", l.weight > 0 ? "#0072B2" : "#D55E00"); e.setAttribute("stroke-width", 0.3 + 3 * s);
    e.setAttribute("stroke-opacity", 0.2 + 0.7 * s); e.setAttribute("class", "edge"); svg.appendChild(e); });
  const colour = {"embedding": "#999999", "cross layer transcoder": "#E69F00", "mlp reconstruction error": "#CC79A7",
                  "logit": "#000000"};
  g.nodes.forEach(n => { const c = document.createElementNS(NS, "circle"), p = pos[n.node_id];
    c.setAttribute("cx", p[0]); c.setAttribute("cy", p[1]); c.setAttribute("r", n.feature_type === "logit" ? 7 : 4.5);
    c.setAttribute("fill", colour[n.feature_type]); c.setAttribute("class", "node"); c.dataset.nodeId = n.node_id;
    c.addEventListener("mouseenter", ev => { tip.style.display = "block"; tip.style.left = ev.clientX + 12 + "px";
      tip.style.top = ev.clientY + 12 + "px"; tip.textContent = (g.tooltips || {})[n.node_id] || n.node_id; });
    c.addEventListener("mouseleave", () => { tip.style.display = "none"; }); svg.appendChild(c); });
  toks.forEach((t, i) => { const l = document.createElementNS(NS, "text"); l.setAttribute("x", 80 + 90 * i);
    l.setAttribute("y", H - 20); l.setAttribute("text-anchor", "middle"); l.setAttribute("class", "token");
    l.textContent = t; svg.appendChild(l); });
  layers.forEach((name, i) => { const l = document.createElementNS(NS, "text"); l.setAttribute("x", 4);
    l.setAttribute("y", H - 56 - 110 * i); l.textContent = name === "E" ? "input" :
      (i === layers.length - 1 ? "logits" : "L" + name); svg.appendChild(l); });
  document.body.dataset.rendered = String(g.nodes.length);
})();
</script></body></html>
"""


def _tooltip(node: dict, examples: dict) -> str:
    lines = [node["node_id"] + " (" + node["feature_type"] + ")"]
    if node.get("activation") is not None:
        lines.append(f"activation {node['activation']:.3f}")
    if node.get("influence") is not None:
        lines.append(f"cumulative influence {node['influence']:.3f}")
    if node["feature_type"] == "logit":
        lines.append(node["clerp"])
    ex = examples.get(node["node_id"])
    if ex:
        lines.append("top tokens: " + ", ".join(f"{t!r} {v:.2f}" for t, v in ex))
    return "\n".join(lines)


def view_subset(data: dict, *, max_edges: int = MAX_VIEW_EDGES,
                max_nodes: int = MAX_VIEW_NODES) -> tuple[list[dict], list[dict], int, int]:
    """``(nodes, links, hidden_nodes, hidden_edges)``: what the HTML view of the graph JSON ``data`` draws, in
    ``data``'s order, and how many of its nodes and edges it leaves out. Past ``max_nodes``, every input and logit
    node is drawn, then the others with the smallest cumulative influence (the most influential); edges to a hidden
    node are hidden; past ``max_edges``, the strongest edges by ``|weight|`` are drawn (ties: the first in ``data``).
    A graph within both caps comes back whole, the same lists."""
    nodes, links = data["nodes"], data["links"]
    if len(nodes) > max_nodes:
        def rank(i):
            n = nodes[i]
            ends = n["feature_type"] in ("embedding", "logit") or n.get("influence") is None
            return (0, 0.0) if ends else (1, n["influence"])

        keep = sorted(sorted(range(len(nodes)), key=rank)[:max_nodes])
        nodes = [nodes[i] for i in keep]
        drawn = {n["node_id"] for n in nodes}
        links = [l for l in links if l["source"] in drawn and l["target"] in drawn]
    if len(links) > max_edges:
        strength = np.abs(np.fromiter((l["weight"] for l in links), dtype=float, count=len(links)))
        keep = np.sort(np.argsort(-strength, kind="stable")[:max_edges])
        links = [links[i] for i in keep]
    return nodes, links, len(data["nodes"]) - len(nodes), len(data["links"]) - len(links)


def graph_html(data: dict, examples: dict | None = None, *, title: str = "attribution graph",
               max_edges: int = MAX_VIEW_EDGES, max_nodes: int = MAX_VIEW_NODES) -> str:
    """A self-contained HTML page (no network) drawing the graph JSON ``data``; ``examples`` maps a feature node's
    ``node_id`` to its top tokens ``[(token, activation), ...]`` for the hover text. A graph past ``max_edges`` or
    ``max_nodes`` is drawn in part (:func:`view_subset`), with a notice on the page (``#hidden-notice``) of how much is
    hidden, and the page's data holds only what is drawn, plus ``hidden: {"nodes": n, "edges": m}``."""
    examples = examples or {}
    nodes, links, hidden_nodes, hidden_edges = view_subset(data, max_edges=max_edges, max_nodes=max_nodes)
    payload = dict(data, tooltips={n["node_id"]: _tooltip(n, examples) for n in nodes})
    notice = ""
    if hidden_nodes or hidden_edges:
        payload.update(nodes=nodes, links=links, hidden={"nodes": hidden_nodes, "edges": hidden_edges})
        hid = " and ".join(f"{k:,} {what}" for k, what in ((hidden_edges, "edges"), (hidden_nodes, "nodes")) if k)
        drawn = f"the {len(links):,} strongest edges by |weight|"
        if hidden_nodes:
            drawn = (f"{len(nodes):,} nodes (every input and logit, then the most influential) and the "
                     f"{len(links):,} strongest of the edges between them by |weight|")
        notice = (f'<p id="hidden-notice"><b>{hid} hidden</b>: drawn are {drawn}. The graph\'s JSON file and '
                  f"graph_edges.csv hold every node and edge.</p>")
    text = json.dumps(payload).replace("</", "<\\/")
    subtitle = (f"{len(data['nodes'])} nodes, {len(data['links'])} edges; prompt: "
                f"{html.escape(data['metadata']['prompt'])}")
    return _PAGE % {"title": html.escape(title), "subtitle": subtitle, "notice": notice, "data": text}


__all__ = ["graph_json", "feature_examples", "graph_html", "view_subset", "MAX_VIEW_EDGES", "MAX_VIEW_NODES"]

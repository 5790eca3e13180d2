"""Token rows that a causal model can score on a longer row: a row that is a prefix of another row has, at each of
its positions, the logits of that longer row (position ``p`` sees tokens ``0..p`` only), so only the rows that are
no other row's prefix need a forward. :mod:`analysis.evaluation.lmeval_model` runs requests this way."""

from __future__ import annotations


def host_rows(rows) -> dict[tuple, tuple]:
    """For each distinct row (a tuple of token ids) the row whose forward holds it: itself, or a longer row it is a
    prefix of. After sorting the distinct rows, a row is a prefix of another exactly when it is a prefix of the next
    one (any row sorted between the two starts with it too), so one pass from the end finds every host."""
    distinct = sorted(set(rows))
    host = {}
    for k in range(len(distinct) - 1, -1, -1):
        row, nxt = distinct[k], distinct[k + 1] if k + 1 < len(distinct) else None
        host[row] = host[nxt] if nxt is not None and nxt[:len(row)] == row else row
    return host


__all__ = ["host_rows"]

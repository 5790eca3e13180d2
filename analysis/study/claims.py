"""Claims on named tasks in a directory that workers share (one machine, or many over a shared file system).

A worker claims task ``T`` by renaming a directory it has filled (``.T.new-<token>/owner.json``: worker id, host,
pid, time) to ``T.claim``. A rename onto an existing non-empty directory fails, so of several claimants exactly one
wins, and a claim exists whole (its owner record inside) or not at all - no window in which a created but unwritten
claim file could be judged. The owner's heartbeat thread rewrites ``T.claim/beat-<token>`` (the time on its clock)
every ``beat`` seconds; when the task is finished the owner writes ``T.claim/done-<token>`` and stops beating. The
claim directory stays: the record of who ran the task.

A claim is stale, and another worker may take it over, when

- its owner's process is gone: the claim was made on this host (same host name, boot and pid namespace) and its pid
  no longer runs, or runs a program started after the claim (a reused pid);
- its heartbeat is older than ``stale_after`` seconds (any host: a node that died, a job that was killed);
- it is marked done though its task is not (its output was deleted to redo it: the caller only asks to claim
  tasks whose output is missing, and ``is_done`` is asked again before the claim is taken).

Taking over renames the stale claim to ``T.dead-<its token>`` (kept as a record) and then claims afresh. Every claim
that ever leaves ``T.claim`` goes to that one name - a take-over, and an owner that gives a task back (a failure,
SIGTERM) - so two workers that both judged one claim stale cannot both move it, and neither can move a fresh claim
made in between (its old token's name is taken: the rename fails). That is the compare-and-swap a plain
unlink-and-create lacks. An owner whose claim was taken over (its heartbeat was late: a suspended process, a hung
mount) finds that at its next beat, and :attr:`~analysis.study.claims.Claim.lost` is set and ``on_lost`` called.

What this does not give: exclusion while an owner still runs but beats later than ``stale_after`` (set it well
above the longest stall of the file system: the default is 10 minutes), and it assumes the hosts' clocks agree to
well within ``stale_after``. A task directory is ``OUT/tasks``; :func:`~analysis.study.claims.claim_records` reads it as
a table.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pandas as pd

from analysis.errors import AnalysisError

#: Seconds without a heartbeat after which a claim from another host is stale.
STALE_AFTER = 600.0


def host_identity() -> dict:
    """This process's host: its name, boot and pid namespace (a pid is only meaningful where all three agree)."""
    def read(path, how):
        try:
            return how(path)
        except OSError:
            return None
    return {"host": socket.gethostname(),
            "boot": read("/proc/sys/kernel/random/boot_id", lambda p: Path(p).read_text().strip()),
            "pidns": read("/proc/self/ns/pid", lambda p: os.stat(p).st_ino)}


def _stat(pid: int) -> list[str] | None:
    """The fields of /proc/<pid>/stat after the program's name (state, ppid, ...), or None."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
        return stat[stat.rindex(")") + 2:].split()
    except (OSError, ValueError):
        return None


def process_start(pid: int) -> int | None:
    """The start time of process ``pid`` (clock ticks since boot, from /proc), or None where it cannot be read."""
    fields = _stat(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def process_alive(pid: int, start: int | None) -> bool:
    """Whether ``pid`` runs here and, when ``start`` is known, is the same process (not a reused pid); a zombie
    (dead, not yet reaped by its parent) is not alive."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:  # another user's process with that pid
        pass
    fields = _stat(pid)
    if fields and fields[0] == "Z":
        return False
    now = process_start(pid)
    return start is None or now is None or now == start


def _taken(e: OSError) -> bool:
    """A rename refused because its target is there (a non-empty directory)."""
    return e.errno in (errno.EEXIST, errno.ENOTEMPTY)


@dataclass
class Claim:
    """A claim this worker holds on ``task``; :meth:`~analysis.study.claims.Claim.done` or
    :meth:`~analysis.study.claims.Claim.release` ends it."""
    root: Path
    task: str
    token: str
    owner: dict
    beat_every: float
    on_lost: Callable[["Claim"], None] | None = None
    lost: threading.Event = field(default_factory=threading.Event)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    @property
    def path(self) -> Path:
        """The claim file of this task in the claims directory."""
        return self.root / f"{self.task}.claim"

    def held(self) -> bool:
        """Whether ``T.claim`` is still this claim (not taken over)."""
        try:
            return json.loads((self.path / "owner.json").read_text()).get("token") == self.token
        except (OSError, ValueError):
            return False

    def beat(self) -> bool:
        """Write the heartbeat now; False (and :attr:`~analysis.study.claims.Claim.lost` set, ``on_lost`` called) when
        the claim was lost."""
        if not self.held():
            if not self.lost.is_set():
                self.lost.set()
                if self.on_lost is not None:
                    self.on_lost(self)
            return False
        _write(self.path / f"beat-{self.token}", json.dumps({"time": time.time()}))
        return True

    def start(self) -> "Claim":
        """Start the heartbeat thread that keeps the claim fresh while the task runs; returns the claim."""
        def run():
            while not self._stop.wait(self.beat_every):
                if not self.beat():
                    return
        self._thread = threading.Thread(target=run, name=f"heartbeat {self.task}", daemon=True)
        self._thread.start()
        return self

    def _end(self) -> None:
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join()

    def done(self, **info) -> None:
        """The task is finished (its output written): record it in the claim, which stays as the record."""
        self._end()
        if self.held():
            _write(self.path / f"done-{self.token}", json.dumps({"time": time.time(), **info}))

    def release(self, why: str) -> None:
        """Give the task back unfinished (a failure, an interruption): the claim moves to ``T.dead-<token>`` with
        ``why`` in it, and any worker may claim the task again."""
        self._end()
        if not self.held():
            return
        _write(self.path / f"released-{self.token}", json.dumps({"time": time.time(), "why": why}))
        try:
            os.rename(self.path, self.root / f"{self.task}.dead-{self.token}")
        except OSError:
            pass


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.tmp-{uuid.uuid4().hex[:8]}")
    tmp.write_text(text)
    os.replace(tmp, path)


class Claims:
    """The claims of one worker in ``root``: :meth:`~analysis.study.claims.Claims.claim` a task,
    :meth:`~analysis.study.claims.Claims.state` of anyone's claim."""

    def __init__(self, root, worker: str, *, stale_after: float = STALE_AFTER, beat: float | None = None,
                 on_lost: Callable[[Claim], None] | None = None):
        if stale_after <= 0:
            raise AnalysisError(f"stale_after {stale_after} must be positive (seconds without a heartbeat)")
        self.root, self.worker, self.stale_after = Path(root), worker, float(stale_after)
        self.beat = float(beat) if beat is not None else min(30.0, self.stale_after / 5)
        self.on_lost, self.identity = on_lost, host_identity()
        self.root.mkdir(parents=True, exist_ok=True)

    def claim(self, task: str, *, is_done: Callable[[], bool] | None = None) -> Claim | None:
        """Claim ``task`` (whose output is missing), taking over a stale claim; None when another worker holds it
        (or finished it meanwhile: ``is_done``). The returned claim is beating."""
        for _ in range(5):  # a claim that vanished, or was replaced, while it was judged: look again
            if not (self.root / f"{task}.claim").exists():
                claim = self._create(task)
                if claim is not None:
                    return claim.start()
            state = self.state(task)
            if state is None:
                continue
            if state["stale"] is None or (state["stale"] == "done" and is_done is not None and is_done()):
                return None
            if self._bury(task, state["token"]):
                claim = self._create(task, took_over={"token": state["token"], "worker": state.get("worker"),
                                                      "why": state["stale"]})
                if claim is not None:
                    return claim.start()
        return None

    def _create(self, task: str, **extra) -> Claim | None:
        token = uuid.uuid4().hex[:16]
        pid = os.getpid()
        owner = {"task": task, "token": token, "worker": self.worker, **self.identity, "pid": pid,
                 "pid_start": process_start(pid), "claimed": time.time(), **extra}
        tmp = self.root / f".{task}.new-{token}"
        tmp.mkdir()
        try:
            (tmp / "owner.json").write_text(json.dumps(owner))
            (tmp / f"beat-{token}").write_text(json.dumps({"time": owner["claimed"]}))
            os.rename(tmp, self.root / f"{task}.claim")
        except OSError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            if _taken(e):
                return None
            raise
        return Claim(self.root, task, token, owner, self.beat, self.on_lost)

    def _bury(self, task: str, token: str) -> bool:
        """Move the claim of ``token`` to ``T.dead-<token>``; False when it is no longer there (gone, or replaced:
        the target name then exists and the rename fails)."""
        grave = self.root / f"{task}.dead-{token}"
        try:
            os.rename(self.root / f"{task}.claim", grave)
        except FileNotFoundError:
            return False
        except OSError as e:
            if _taken(e):
                return False
            raise
        try:
            moved = json.loads((grave / "owner.json").read_text()).get("token")
        except (OSError, ValueError):
            moved = None
        if moved != token:  # cannot happen while graves are kept; put back what was not ours to move
            try:
                os.rename(grave, self.root / f"{task}.claim")
            except OSError:
                pass
            return False
        return True

    def state(self, task: str) -> dict | None:
        """The claim on ``task`` (its owner record, ``beat``: the last heartbeat's time, ``done``, and ``stale``:
        why it may be taken over - "done", "process gone", "no heartbeat for N s" - or None), or None if
        unclaimed."""
        path = self.root / f"{task}.claim"
        try:
            owner = json.loads((path / "owner.json").read_text())
        except FileNotFoundError:
            return None
        except (OSError, ValueError) as e:
            raise AnalysisError(f"{path}/owner.json cannot be read ({e}); remove {path} to free the task") from None
        token = owner.get("token")
        try:
            beat = json.loads((path / f"beat-{token}").read_text())["time"]
        except (OSError, ValueError, KeyError):
            beat = owner.get("claimed", 0.0)
        done = (path / f"done-{token}").exists()
        stale = None
        if done:
            stale = "done"
        elif all(owner.get(k) == v for k, v in self.identity.items()) and not process_alive(
                int(owner["pid"]), owner.get("pid_start")):
            stale = "process gone"
        elif time.time() - beat > self.stale_after:
            stale = f"no heartbeat for {time.time() - beat:.0f} s"
        return {**owner, "beat": beat, "done": done, "stale": stale}


def claim_records(root) -> pd.DataFrame:
    """Every claim ever made in ``root``, one row each: ``task``, ``state`` (``done``, ``running`` - or stale, not
    yet taken over -, ``dead``: taken over or given back), ``worker``, ``host``, ``pid``, ``token``, ``claimed``
    and ``beat`` (seconds since the epoch), ``took_over`` (the token of the claim it replaced, or empty) and
    ``released`` (why its owner gave it back, or empty)."""
    rows = []
    for path in sorted(Path(root).glob("*.claim")) + sorted(Path(root).glob("*.dead-*")):
        try:
            owner = json.loads((path / "owner.json").read_text())
        except (OSError, ValueError):
            continue
        token = owner.get("token")
        try:
            beat = json.loads((path / f"beat-{token}").read_text())["time"]
        except (OSError, ValueError, KeyError):
            beat = owner.get("claimed")
        try:
            released = json.loads((path / f"released-{token}").read_text())["why"]
        except (OSError, ValueError, KeyError):
            released = ""
        state = "dead" if path.suffix != ".claim" else "done" if (path / f"done-{token}").exists() else "running"
        rows.append({"task": owner.get("task"), "state": state, "worker": owner.get("worker"),
                     "host": owner.get("host"), "pid": owner.get("pid"), "token": token,
                     "claimed": owner.get("claimed"), "beat": beat,
                     "took_over": (owner.get("took_over") or {}).get("token", ""), "released": released})
    return pd.DataFrame(rows, columns=["task", "state", "worker", "host", "pid", "token", "claimed", "beat",
                                       "took_over", "released"])


__all__ = ["Claim", "Claims", "claim_records", "host_identity", "process_alive", "STALE_AFTER"]

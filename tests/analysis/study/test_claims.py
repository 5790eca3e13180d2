"""Claims on tasks: one winner among racing claimants, a live claim kept, stale ones (dead process, no heartbeat,
done but redone) taken over exactly once, and an owner that lost its claim told so."""

import json
import os
import subprocess
import sys
import threading
import time

import pytest

from analysis import AnalysisError
from analysis.study.claims import Claims, claim_records


def test_one_of_many_racing_claimants_wins(tmp_path):
    won, start = [], threading.Barrier(8)

    def claimant(i):
        claims = Claims(tmp_path, f"w{i}")
        start.wait()
        c = claims.claim("t")
        if c is not None:
            won.append(c)

    threads = [threading.Thread(target=claimant, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    rec = claim_records(tmp_path)
    assert list(rec.task) == ["t"] and rec.worker[0] == won[0].owner["worker"] and rec.state[0] == "running"
    won[0].done()
    assert claim_records(tmp_path).state[0] == "done"
    assert not list(tmp_path.glob(".*"))  # no temporary directory is left behind


def test_a_live_claim_is_kept_and_a_done_one_taken_only_when_its_task_is_not_done(tmp_path):
    a, b = Claims(tmp_path, "a"), Claims(tmp_path, "b")
    c = a.claim("t")
    assert b.claim("t") is None and b.state("t")["stale"] is None  # alive, on this host, beating
    c.done()
    assert b.claim("t", is_done=lambda: True) is None  # finished: nothing to take
    again = b.claim("t", is_done=lambda: False)  # its output was deleted: redo it
    assert again is not None and again.owner["took_over"] == {"token": c.token, "worker": "a", "why": "done"}
    again.done()


def _forge(root, task, **owner):
    """A claim as another worker would have left it."""
    d = root / f"{task}.claim"
    d.mkdir()
    record = {"task": task, "token": "f" * 16, "worker": "elsewhere", "host": "other-host", "boot": "x", "pidns": 1,
              "pid": 1, "pid_start": None, "claimed": time.time(), **owner}
    (d / "owner.json").write_text(json.dumps(record))
    return record


def test_another_hosts_claim_is_stale_after_its_heartbeat_stops(tmp_path):
    b = Claims(tmp_path, "b", stale_after=60)
    _forge(tmp_path, "fresh", claimed=time.time() - 30)
    _forge(tmp_path, "silent", claimed=time.time() - 90)
    assert b.claim("fresh") is None  # 30 s without a beat: within 60
    assert b.state("silent")["stale"].startswith("no heartbeat for 9")
    took = b.claim("silent")
    assert took is not None and took.owner["took_over"]["worker"] == "elsewhere"
    assert (tmp_path / f"silent.dead-{'f' * 16}" / "owner.json").exists()  # the old claim, kept as the record
    took.done()


def test_a_claim_of_a_process_that_is_gone_is_taken_at_once(tmp_path):
    b = Claims(tmp_path, "b", stale_after=3600)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    _forge(tmp_path, "t", **b.identity, pid=int(gone.stdout))  # this host: the pid is checked, not the heartbeat
    assert b.state("t")["stale"] == "process gone"
    assert b.claim("t") is not None
    _forge(tmp_path, "reused", **b.identity, pid=1, pid_start=-5)  # pid 1 runs, but started at another time
    assert b.state("reused")["stale"] == "process gone"
    zombie = subprocess.Popen([sys.executable, "-c", "pass"])  # exits, and stays unreaped until wait()
    deadline = time.monotonic() + 30
    while _state_letter(zombie.pid) != "Z" and time.monotonic() < deadline:
        time.sleep(0.02)
    _forge(tmp_path, "zombie", **b.identity, pid=zombie.pid)
    assert b.state("zombie")["stale"] == "process gone"
    zombie.wait()
    _forge(tmp_path, "mine", **b.identity, pid=os.getpid())
    assert b.state("mine")["stale"] is None


def _state_letter(pid):
    text = open(f"/proc/{pid}/stat").read()
    return text[text.rindex(")") + 2]


def test_two_workers_that_judged_one_claim_stale_cannot_both_take_it(tmp_path):
    """Both saw the same stale claim; the first moves it aside and claims afresh; the second's move must fail
    rather than move the fresh claim (a plain delete-and-create would: both would then run the task)."""
    b, c = Claims(tmp_path, "b", stale_after=1), Claims(tmp_path, "c", stale_after=1)
    old = _forge(tmp_path, "t", claimed=time.time() - 10)
    assert b.state("t")["stale"] and c.state("t")["stale"]
    assert b._bury("t", old["token"])
    fresh = b._create("t")
    assert not c._bury("t", old["token"])  # its target name is taken by the claim it meant to move
    assert fresh.held() and c.claim("t") is None
    assert not b._bury("t", old["token"])


def test_an_owner_whose_claim_was_taken_over_is_told(tmp_path):
    lost = []
    a = Claims(tmp_path, "a", stale_after=60, on_lost=lost.append)
    claim = a._create("t")  # not beating: as if the owner were suspended
    record = json.loads((claim.path / "owner.json").read_text())
    record.update(host="other-host")  # seen from elsewhere, with an old beat
    (claim.path / "owner.json").write_text(json.dumps(record))
    (claim.path / f"beat-{claim.token}").write_text(json.dumps({"time": time.time() - 120}))
    b = Claims(tmp_path, "b", stale_after=60)
    assert b.claim("t") is not None
    assert claim.beat() is False and lost == [claim] and claim.lost.is_set()


def test_a_released_claim_frees_its_task_and_says_why(tmp_path):
    a, b = Claims(tmp_path, "a"), Claims(tmp_path, "b")
    c = a.claim("t")
    c.release("ValueError: boom")
    rec = claim_records(tmp_path)
    assert list(rec.state) == ["dead"] and rec.released[0] == "ValueError: boom"
    assert b.claim("t") is not None


def test_the_heartbeat_is_written_while_the_task_runs(tmp_path):
    a = Claims(tmp_path, "a", beat=0.05)
    c = a.claim("t")
    first = a.state("t")["beat"]
    time.sleep(0.3)
    assert a.state("t")["beat"] > first
    c.done()
    stopped = a.state("t")["beat"]
    time.sleep(0.15)
    assert a.state("t")["beat"] == stopped


def test_bad_claims_fail_in_one_line(tmp_path):
    with pytest.raises(AnalysisError, match="must be positive"):
        Claims(tmp_path, "a", stale_after=0)
    (tmp_path / "t.claim").mkdir()
    (tmp_path / "t.claim" / "owner.json").write_text("{not json")
    with pytest.raises(AnalysisError, match="remove .*t.claim to free the task"):
        Claims(tmp_path, "a").claim("t")

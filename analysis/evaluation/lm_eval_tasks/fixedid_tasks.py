"""Loaders of the built-in language's lm-eval tasks: each reads its JSONL beside this file (written by
``analysis.evaluation.lmeval_tasks.write_task_data``), so the tasks need no network and no dataset hub."""

import json
from pathlib import Path


def _load(name):
    import datasets

    with (Path(__file__).parent / f"{name}.jsonl").open() as f:
        rows = [json.loads(line) for line in f if line.strip()]
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(rows)})


def ioi(**kwargs):
    return _load("fixedid_ioi")


def agreement(**kwargs):
    return _load("fixedid_agreement")


def facts(**kwargs):
    return _load("fixedid_facts")


def lastword(**kwargs):
    return _load("fixedid_lastword")

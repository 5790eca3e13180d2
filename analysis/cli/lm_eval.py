"""lm-eval's own command line, with the model ``fixedid`` registered and the built-in language's tasks included.

    python -m analysis.cli.lm_eval run --model fixedid --model_args pretrained=fixedid-demo/checkpoints/canonical \\
        --tasks fixedid_ioi,fixedid_lastword

lm-eval 0.4 finds models only in its own registry (it reads no plugin entry points), so its ``lm_eval`` command
cannot see ``fixedid`` without code changes; this module is that command with the model registered. Without
``--include_path`` the built-in tasks' directory is added to ``run`` and ``ls``. Bad fixedid ``--model_args`` (an
unknown one, a non-positive ``max_batch_tokens``, a missing checkpoint) get one line on stderr and exit status 2.
"""

from __future__ import annotations

import sys


def main(argv=None) -> None:
    from lm_eval.__main__ import cli_evaluate

    from analysis.evaluation.lmeval import TASKS_DIR, register
    from fixedid.errors import FixedIdError

    register()
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("run", "ls") and "--include_path" not in args:
        args += ["--include_path", str(TASKS_DIR)]
    saved = sys.argv
    sys.argv = [saved[0], *args]  # lm-eval's command reads sys.argv; restored after it
    try:
        cli_evaluate()
    except FixedIdError as e:
        print(f"lm_eval: error: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    finally:
        sys.argv = saved


if __name__ == "__main__":
    main()

"""lm-eval's own command line, with the model ``fixedid`` registered and the built-in language's tasks included."""

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

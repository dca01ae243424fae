"""The lab: what measures the package rather than what a user of the model runs (Table 3's grid and report, the
CPU benchmark, the data benchmark, the GPU check). Not installed; each command is a script beside this folder
(`python scripts/table3.py --help`), run from a checkout where `vanilla_transformer` is importable."""

import os
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parent.parent


def lab_process(module: str, *arguments: str, env: dict[str, str] | None = None) -> tuple[list[str], dict[str, str]]:
    """The command and environment (`env`, default this process's) that run `python -m lab.<module> ARGUMENTS` in a
    fresh process: `lab` is found through PYTHONPATH, wherever the caller's working folder is."""
    env = dict(os.environ if env is None else env)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, (str(SCRIPTS), env.get("PYTHONPATH"))))
    return [sys.executable, "-m", f"lab.{module}", *arguments], env

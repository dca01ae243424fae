"""`python scripts/evaluate_bleu.py` (a source checkout) = `vanilla-transformer evaluate`: the same flags.

The command is vanilla_transformer/cli/evaluate.py; `--help` lists its flags.
"""

# named evaluate_bleu.py: Python puts a script's folder first on sys.path, so a scripts/evaluate.py would shadow the
# `evaluate` package for every script in this folder
from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer evaluate` with `argv` (default: the command line)."""
    run_script("evaluate", argv)


if __name__ == "__main__":
    main()

"""`python scripts/train_no_trainer.py` (a source checkout) = `vanilla-transformer train-no-trainer`: the same flags.

The command is vanilla_transformer/cli/train_no_trainer.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer train-no-trainer` with `argv` (default: the command line)."""
    run_script("train-no-trainer", argv)


if __name__ == "__main__":
    main()

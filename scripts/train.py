"""`python scripts/train.py` (a source checkout) = `vanilla-transformer train`: the same flags.

The command is vanilla_transformer/cli/train.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer train` with `argv` (default: the command line)."""
    run_script("train", argv)


if __name__ == "__main__":
    main()

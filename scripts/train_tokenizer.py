"""`python scripts/train_tokenizer.py` (a source checkout) = `vanilla-transformer train-tokenizer`: the same flags.

The command is vanilla_transformer/cli/train_tokenizer.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer train-tokenizer` with `argv` (default: the command line)."""
    run_script("train-tokenizer", argv)


if __name__ == "__main__":
    main()

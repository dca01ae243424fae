"""`python scripts/translate.py` (a source checkout) = `vanilla-transformer translate`: the same flags.

The command is vanilla_transformer/cli/translate.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer translate` with `argv` (default: the command line)."""
    run_script("translate", argv)


if __name__ == "__main__":
    main()

"""`python scripts/average_checkpoints.py` (a source checkout) = `vanilla-transformer average`: the same flags.

The command is vanilla_transformer/cli/average.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer average` with `argv` (default: the command line)."""
    run_script("average", argv)


if __name__ == "__main__":
    main()

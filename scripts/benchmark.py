"""`python scripts/benchmark.py` (a source checkout) = `vanilla-transformer benchmark`: the same flags.

The command is vanilla_transformer/cli/benchmark.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer benchmark` with `argv` (default: the command line)."""
    run_script("benchmark", argv)


if __name__ == "__main__":
    main()

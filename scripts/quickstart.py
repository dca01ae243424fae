"""`python scripts/quickstart.py` (a source checkout) = `vanilla-transformer demo`: the same flags.

The command is vanilla_transformer/cli/demo.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer demo` with `argv` (default: the command line)."""
    run_script("demo", argv)


if __name__ == "__main__":
    main()

"""`python scripts/release.py` (a source checkout) = `vanilla-transformer release`: the same flags.

The command is vanilla_transformer/cli/release.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer release` with `argv` (default: the command line)."""
    run_script("release", argv)


if __name__ == "__main__":
    main()

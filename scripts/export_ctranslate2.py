"""`python scripts/export_ctranslate2.py` (a source checkout) = `vanilla-transformer export-ctranslate2`, same flags.

The command is vanilla_transformer/cli/export_ctranslate2.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer export-ctranslate2` with `argv` (default: the command line)."""
    run_script("export-ctranslate2", argv)


if __name__ == "__main__":
    main()

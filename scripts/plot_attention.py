"""`python scripts/plot_attention.py` (a source checkout) = `vanilla-transformer plot-attention`: the same flags.

The command is vanilla_transformer/cli/plot_attention.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer plot-attention` with `argv` (default: the command line)."""
    run_script("plot-attention", argv)


if __name__ == "__main__":
    main()

"""`python scripts/push_to_hub.py` (a source checkout) = `vanilla-transformer push`: the same flags.

The command is vanilla_transformer/cli/push.py; `--help` lists its flags.
"""

from vanilla_transformer.cli.main import run_script


def main(argv: list[str] | None = None) -> None:
    """Run `vanilla-transformer push` with `argv` (default: the command line)."""
    run_script("push", argv)


if __name__ == "__main__":
    main()

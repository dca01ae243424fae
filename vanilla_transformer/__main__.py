"""`python -m vanilla_transformer` = the `vanilla-transformer` command (vanilla_transformer/cli.py)."""

from .cli import main

if __name__ == "__main__":
    main()

"""`python -m vanilla_transformer` = the `vanilla-transformer` command (vanilla_transformer/cli/main.py)."""

from .cli.main import main

if __name__ == "__main__":
    main()

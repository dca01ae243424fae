"""The main job: build the paper's base model, translate with beam search, save a Hub-ready folder and reload it
as remote code in a clean process. Usage: python scripts/quickstart.py [--output-dir DIR]"""

import argparse

from vanilla_transformer.quickstart import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default="outputs/quickstart", help="where the Hub-ready folder is written")
    parser.add_argument("--vocab-size", type=int, default=37000, help="vocabulary size (the paper: 37000)")
    args = parser.parse_args()
    run(args.output_dir, args.vocab_size)

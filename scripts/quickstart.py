"""The main job: train the demo preset on the built-in En→De corpus, score held-out pairs with the paper's decoding,
save a Hub-ready folder and translate real sentences with the released checkpoint.
Usage: python scripts/quickstart.py [--output-dir DIR]"""

import argparse

import vanilla_transformer  # noqa: F401  (registers the Auto classes)
from vanilla_transformer.quickstart import run

if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--output-dir", default="outputs/demo", help="where the run and its final folder go")
    parser.add_argument("--max-steps", type=int, help="shorter or longer than the demo preset's updates")
    args = parser.parse_args()
    run(args.output_dir, args.max_steps)

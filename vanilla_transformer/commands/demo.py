"""The README's main job: train the demo preset on the built-in En→De corpus, score it, package it.

Trains the `demo` preset (2+2 layers, d_model 128) with the paper's recipe (§5), scores held-out pairs with the
paper's decoding (§6.1), saves a Hub-ready folder, checks that it loads as remote code in a process without this
package, and translates real sentences with the released Multi30k checkpoint when the source checkout is at hand.

    vanilla-transformer demo [--output-dir outputs/demo] [--max-steps N]
"""

import argparse


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's flags."""
    parser.add_argument("--output-dir", default="outputs/demo", help="where the run and its final folder go")
    parser.add_argument("--max-steps", type=int, help="shorter or longer than the demo preset's updates")


def run(args: argparse.Namespace) -> None:
    """Run `vanilla_transformer.quickstart.run`."""
    from ..quickstart import run as run_demo

    run_demo(args.output_dir, args.max_steps)

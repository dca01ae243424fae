"""The README's main job: train the demo preset on the built-in En→De corpus, score it, package it.

Trains the `demo` preset (2+2 layers, d_model 128) with the paper's recipe (§5), scores held-out pairs with the
paper's decoding (§6.1), saves a Hub-ready folder, checks that it loads as remote code in a process without this
package, and translates real sentences with the released Multi30k checkpoint when the source checkout is at hand.

    vanilla-transformer demo [--output-dir outputs/demo] [--max-steps N]
"""

import argparse

from . import int_in_range, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The demo's flags."""
    from ..presets import TRAINING_PRESETS

    # the demo averages its last checkpoints, and saves at most one per update
    average_last = TRAINING_PRESETS["demo"].average_last
    parser.add_argument(
        "--output-dir", default="outputs/demo", type=output_dir, help="where the run and its final folder go"
    )
    parser.add_argument(
        "--max-steps",
        type=int_in_range(
            average_last, fix=f"give {average_last} or more, one update per checkpoint the demo averages"
        ),
        help="shorter or longer than the demo preset's updates",
    )


def run(args: argparse.Namespace) -> None:
    """Run `vanilla_transformer.quickstart.run`."""
    from ..quickstart import run as run_demo

    run_demo(args.output_dir, args.max_steps)

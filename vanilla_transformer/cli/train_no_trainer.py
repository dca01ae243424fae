"""Train with the paper's recipe (§5) in a plain accelerate loop.

The loop is `training/no_trainer.py`, the counterpart of transformers' `run_translation_no_trainer.py`;
`vanilla-transformer train` runs the same recipe on Seq2SeqTrainer.

    vanilla-transformer train-no-trainer --preset demo --output-dir outputs/demo-nt                  # one process
    accelerate launch --num_processes 8 -m vanilla_transformer train-no-trainer --preset paper-base --output-dir base
    torchrun --nproc_per_node 2 -m vanilla_transformer train-no-trainer --preset demo --output-dir outputs/demo-nt

Interrupted runs resume from their newest checkpoint-N (accelerate's `load_state`) when started again with the same
--output-dir.
"""

import argparse

from ..errors import UsageError
from .arguments import add_setting_arguments, add_training_arguments, positive_int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(parser)
    helps = {
        "gradient_accumulation_steps": "instead of --tokens-per-update",
        "eval_batch_size": "pairs per process and validation batch",
        "train_samples": "train on the first N pairs only",
    }
    add_setting_arguments(parser, helps, eval_batch_size=64)
    parser.add_argument(
        "--mixed-precision", choices=["no", "fp16", "bf16"], help="default: accelerate's config or launch flag"
    )
    parser.add_argument(
        "--streaming",
        action="store_true",
        help="read the training pairs as a stream (line-aligned files or a datasets name), never whole: batches "
        "from a seeded, length-sorted buffer of --stream-buffer-pairs pairs; needs --tokenizer",
    )
    parser.add_argument(
        "--stream-buffer-pairs",
        type=positive_int,
        default=None,
        help="pairs per shuffle buffer with --streaming (default 1,000,000: ~100 MB of ids per process)",
    )


def run(args: argparse.Namespace) -> None:
    from ..training.no_trainer import train_no_trainer
    from ..training.settings import TrainingSettings

    if args.stream_buffer_pairs and not args.streaming:
        raise UsageError("--stream-buffer-pairs sizes the buffer of --streaming: add --streaming, or leave it out")
    settings = TrainingSettings.from_arguments(args, "train-no-trainer")
    train_no_trainer(settings)

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
from .arguments import add_training_arguments, positive_int, training_type


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`--preset`, one flag per preset field, the options both training commands share, and those of the loop."""
    add_training_arguments(parser)
    parser.add_argument(
        "--gradient-accumulation-steps",
        type=training_type("gradient_accumulation_steps"),
        help="instead of --tokens-per-update",
    )
    parser.add_argument(
        "--mixed-precision", choices=["no", "fp16", "bf16"], help="default: accelerate's config or launch flag"
    )
    parser.add_argument(
        "--eval-batch-size",
        type=training_type("eval_batch_size"),
        default=64,
        help="pairs per process and validation batch",
    )
    parser.add_argument("--train-samples", type=training_type("train_samples"), help="train on the first N pairs only")
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
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="train in --output-dir even if it is a non-empty folder that holds no run of ours (no preset.json)",
    )


def run(args: argparse.Namespace) -> None:
    """Train (or resume) the run in the loop."""
    from ..training.no_trainer import train_no_trainer
    from ..training.settings import TrainingSettings

    if args.stream_buffer_pairs and not args.streaming:
        raise UsageError("--stream-buffer-pairs sizes the buffer of --streaming: add --streaming, or leave it out")
    train_no_trainer(TrainingSettings.from_arguments(args, "train-no-trainer"))

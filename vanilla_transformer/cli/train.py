"""Train with the paper's recipe (§5) on Seq2SeqTrainer.

The presets and their fields are in `vanilla_transformer/training/presets.py`; every field is a flag.

    vanilla-transformer train --preset multi30k --output-dir outputs/multi30k
    vanilla-transformer train --preset demo --output-dir outputs/demo          # built-in corpus, minutes on a CPU
    vanilla-transformer train --preset paper-base --corpus wmt14 --dataset-config de-en --output-dir outputs/base
    accelerate launch --num_processes 8 -m vanilla_transformer train --preset paper-base --bf16 --output-dir out/base
    torchrun --nproc_per_node 2 -m vanilla_transformer train --preset demo --output-dir outputs/demo  # 2 CPU processes

Interrupted runs resume from their newest checkpoint when started again with the same --output-dir; a flag left
out then keeps the value the run recorded in its preset.json (`train --output-dir RUN` alone continues RUN).
"""

import argparse

from .arguments import add_training_arguments


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_training_arguments(parser)
    precision = parser.add_mutually_exclusive_group()
    precision.add_argument(
        "--bf16",
        action="store_true",
        help="bfloat16 mixed precision (autocast, fp32 weights and optimizer): GPUs from Ampere on, CPUs with AMX",
    )
    precision.add_argument("--fp16", action="store_true", help="float16 mixed precision with loss scaling")
    parser.add_argument("--report-to", default="tensorboard", help="'tensorboard', 'none', or another integration")


def run(args: argparse.Namespace) -> None:
    from ..training.run import train
    from ..training.run_folder import RunFolder
    from ..training.settings import TrainingSettings

    folder = RunFolder.read(args.output_dir)
    settings = TrainingSettings.from_arguments(args, "train", folder.record)
    result = train(settings, folder)
    print(f"final model: {result.final_dir}")

"""Export a saved model folder to CTranslate2 (fast CPU/GPU inference, int8 weights) for `translate --engine`.

Needs the optional package ctranslate2 (the extra: pip install ".[ctranslate2]" in a checkout).

    vanilla-transformer export-ctranslate2 MODEL_DIR OUTPUT_DIR [--quantization int8] [--max-positions 1024]
    vanilla-transformer translate --engine ctranslate2 --model OUTPUT_DIR --input source.txt
"""

import argparse

from .arguments import add_overwrite_argument, int_in_range, model_source, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..inference.ctranslate2_engine import QUANTIZATIONS

    parser.add_argument("model_dir", type=model_source, help="a saved model folder or Hub id (with its tokenizer)")
    parser.add_argument("output_dir", type=output_dir, help="the CTranslate2 folder to write")
    parser.add_argument(
        "--quantization",
        default="float32",
        choices=QUANTIZATIONS,
        help="the weights' type: float32 (default; same outputs as PyTorch), int8 (fastest on a CPU), ...",
    )
    parser.add_argument(
        "--max-positions",
        type=int_in_range(1),
        help="positions the export holds (default: max(max_position_embeddings, 1024); a learned table is exported "
        "as it is); longer sentences and translations cannot be decoded by the export",
    )
    add_overwrite_argument(parser, "OUTPUT_DIR")


def run(args: argparse.Namespace) -> None:
    from ..inference.ctranslate2_engine import export_ctranslate2

    folder = export_ctranslate2(
        args.model_dir, args.output_dir, args.quantization, args.max_positions, overwrite=args.overwrite
    )
    print(f"exported {args.model_dir} ({args.quantization}) to {folder}")

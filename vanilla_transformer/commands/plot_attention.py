"""Draw a sentence's attention as PNG, as the paper's Figures 3-5.

One figure of encoder self-attention and one of encoder-decoder attention, for the layers and heads asked for.

    vanilla-transformer plot-attention --model model_cards/vanilla-transformer-multi30k-en-de \\
        --sentence "A man is riding a bike." --layers 0 3 --heads 0 1 2 3 --output-dir outputs/attention
"""

import argparse
from pathlib import Path


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, the sentence, and which layers and heads."""
    parser.add_argument("--model", required=True, help="a model folder or Hub id")
    parser.add_argument("--sentence", required=True, help="the source sentence")
    parser.add_argument("--target", help="the target sentence (default: the model's translation)")
    parser.add_argument("--layers", type=int, nargs="+", default=[0], help="0-based layer numbers")
    parser.add_argument("--heads", type=int, nargs="+", default=[0], help="0-based head numbers")
    parser.add_argument("--output-dir", default=".")


def run(args: argparse.Namespace) -> None:
    """Write attention-encoder.png and attention-cross.png under --output-dir."""
    from ..integrity import load_model_and_tokenizer
    from ..plots import attention_maps, plot_attention

    model, tokenizer = load_model_and_tokenizer(args.model)
    maps = attention_maps(model, tokenizer, args.sentence, args.target)
    output = Path(args.output_dir)
    output.mkdir(parents=True, exist_ok=True)
    for kind in ("encoder", "cross"):
        path = plot_attention(maps, kind, args.layers, args.heads, output / f"attention-{kind}.png")
        print(f"wrote {path}")

"""Draw a sentence's attention as PNG, as the paper's Figures 3-5.

One figure of encoder self-attention and one of encoder-decoder attention, for the layers and heads asked for.

    vanilla-transformer plot-attention --model model_cards/vanilla-transformer-multi30k-en-de \\
        --sentence "A man is riding a bike." --layers 0 3 --heads 0 1 2 3 --output-dir outputs/attention
"""

import argparse
from contextlib import ExitStack
from pathlib import Path

from ..errors import VanillaTransformerError
from .arguments import model_source, non_negative_int, output_dir


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", required=True, type=model_source, help="a model folder or Hub id")
    parser.add_argument("--sentence", required=True, help="the source sentence")
    parser.add_argument("--target", help="the target sentence (default: the model's translation)")
    parser.add_argument("--layers", type=non_negative_int, nargs="+", default=[0], help="0-based layer numbers")
    parser.add_argument("--heads", type=non_negative_int, nargs="+", default=[0], help="0-based head numbers")
    parser.add_argument("--output-dir", default=".", type=output_dir)


def run(args: argparse.Namespace) -> None:
    from ..files.loading import load_model_and_tokenizer
    from ..files.outputs import check_output_file, staged_file
    from ..inference.plots import attention_maps, plot_attention

    if not args.sentence.strip():  # the model would translate nothing into something, and the plot show that
        raise VanillaTransformerError("--sentence is empty: give the source sentence whose attention to draw.")
    paths = {kind: Path(args.output_dir) / f"attention-{kind}.png" for kind in ("encoder", "cross")}
    model_folder = args.model if Path(args.model).expanduser().is_dir() else None  # else a Hub id
    for path in paths.values():  # before the model loads: no figure lands in the model folder
        check_output_file(path, [("--model", model_folder)], flag="--output-dir")
    model, tokenizer = load_model_and_tokenizer(args.model)
    config = model.config  # layers and heads that do not exist are refused before anything is written
    layers = min(config.encoder_layers, config.decoder_layers)
    heads = min(config.encoder_attention_heads, config.decoder_attention_heads)
    if max(args.layers) >= layers or max(args.heads) >= heads:
        raise VanillaTransformerError(
            f"--layers {' '.join(map(str, args.layers))} --heads {' '.join(map(str, args.heads))}: the model has "
            f"layers 0..{layers - 1} and heads 0..{heads - 1}; give numbers in those ranges."
        )
    maps = attention_maps(model, tokenizer, args.sentence, args.target)
    # both figures are drawn under hidden names and replace the old ones only when both are complete
    with ExitStack() as stack:
        staged = {kind: stack.enter_context(staged_file(path, "--output-dir", ".png")) for kind, path in paths.items()}
        for kind, staging in staged.items():
            plot_attention(maps, kind, args.layers, args.heads, staging)
    for path in paths.values():
        print(f"wrote {path}")

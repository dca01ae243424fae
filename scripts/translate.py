"""Translate a file (or stdin), one sentence per line, with the paper's decoding (§6.1) unless told otherwise.

Usage: python scripts/translate.py --model DIR_OR_HUB_ID [--input FILE] [--output FILE] [--batch-size 64]
[--num-beams N] [--device cpu|cuda]. Empty lines stay empty, so output lines match input lines.
"""

import argparse
import logging
import sys
import time

import torch
from transformers import AutoModelForSeq2SeqLM, AutoTokenizer

import vanilla_transformer  # noqa: F401  (registers the model type with the Auto classes)
from vanilla_transformer.decoding import translate

logger = logging.getLogger("translate")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", required=True, help="a saved model folder or a Hub id (with its tokenizer)")
    parser.add_argument("--input", default="-", help="source sentences, one per line; '-' reads stdin (default)")
    parser.add_argument("--output", default="-", help="where translations go, one per line; '-' is stdout (default)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per generate call (default 64)")
    parser.add_argument(
        "--num-beams", type=int, default=None, help="beam size; default: the model's generation config (paper: 4)"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ...; default: cuda if available")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tokenizer = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForSeq2SeqLM.from_pretrained(args.model).to(device).eval()

    if args.input == "-":
        lines = sys.stdin.read().splitlines()
    else:
        with open(args.input, encoding="utf-8") as source:
            lines = source.read().splitlines()
    generate_kwargs = {} if args.num_beams is None else {"num_beams": args.num_beams}
    start = time.perf_counter()
    translations = translate(model, tokenizer, lines, batch_size=args.batch_size, **generate_kwargs)
    logger.info("translated %d lines in %.1fs on %s", len(lines), time.perf_counter() - start, device)

    text = "".join(line + "\n" for line in translations)
    if args.output == "-":
        sys.stdout.write(text)
    else:
        with open(args.output, "w", encoding="utf-8") as target:
            target.write(text)


if __name__ == "__main__":
    main()

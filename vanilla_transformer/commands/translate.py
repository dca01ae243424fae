"""Translate a file or stdin, line by line, with the paper's decoding (§6.1).

One sentence per line; the decoding is the model's generation config (the paper's) unless told otherwise.

    vanilla-transformer translate --model DIR_OR_HUB_ID [--input FILE] [--output FILE] [--batch-size 64]
        [--num-beams N] [--device cpu|cuda]

Line N of the output translates line N of the input: empty lines stay empty, lines end at "\\n" only (CRLF input is
read as LF), and a line break inside a translation becomes a space.
"""

import argparse
import logging
import sys
import time

logger = logging.getLogger("translate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, the files and the decoding."""
    parser.add_argument("--model", required=True, help="a saved model folder or a Hub id (with its tokenizer)")
    parser.add_argument("--input", default="-", help="source sentences, one per line; '-' reads stdin (default)")
    parser.add_argument("--output", default="-", help="where translations go, one per line; '-' is stdout (default)")
    parser.add_argument("--batch-size", type=int, default=64, help="sentences per generate call (default 64)")
    parser.add_argument(
        "--num-beams", type=int, default=None, help="beam size; default: the model's generation config (paper: 4)"
    )
    parser.add_argument("--device", default=None, help="cpu, cuda, cuda:1, ...; default: cuda if available")


def run(args: argparse.Namespace) -> None:
    """Translate the lines and write them; timing and warnings go to stderr, so stdout holds translations only."""
    import torch

    from ..data.corpora import read_lines, read_stream_lines, write_lines
    from ..decoding import translate
    from ..integrity import load_model_and_tokenizer

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    # checks the folder first (config, safetensors only, checksums, tokenizer size): errors name the file
    model, tokenizer = load_model_and_tokenizer(args.model, device=device)

    lines = read_stream_lines(sys.stdin.buffer, "<stdin>") if args.input == "-" else read_lines(args.input)
    generate_kwargs = {} if args.num_beams is None else {"num_beams": args.num_beams}
    start = time.perf_counter()
    translations = translate(model, tokenizer, lines, batch_size=args.batch_size, **generate_kwargs)
    logger.info("translated %d lines in %.1fs on %s", len(lines), time.perf_counter() - start, device)

    broken = write_lines(None if args.output == "-" else args.output, translations)
    if broken:
        logger.warning("%d translation(s) contained line breaks, written as spaces to keep lines aligned", broken)

"""Translate a file or stdin, line by line, with the paper's decoding (§6.1).

One sentence per line; the decoding is the model's generation config (the paper's) unless told otherwise.

    vanilla-transformer translate --model DIR_OR_HUB_ID [--input FILE] [--output FILE] [--batch-size 64]
        [--num-beams N] [--device cpu|cuda] [--dtype bfloat16] [--engine pytorch|ctranslate2]

`--engine ctranslate2` decodes with a CTranslate2 export of the model (`vanilla-transformer export-ctranslate2`):
the same tokenizer, beam size, maximum length and GNMT length penalty (applied to its n-best list).

Line N of the output translates line N of the input: empty lines stay empty, lines end at "\\n" only (CRLF input is
read as LF), and a line break inside a translation becomes a space.
"""

import argparse
import logging
import os
import stat
import sys
import time
from pathlib import Path

from .arguments import (
    add_engine_arguments,
    device,
    input_file,
    model_source,
    num_beams,
    output_file_or_stdout,
    positive_int,
)

logger = logging.getLogger("translate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """The model, the files and the decoding."""
    parser.add_argument(
        "--model", required=True, type=model_source, help="a saved model folder or a Hub id (with its tokenizer)"
    )
    parser.add_argument(
        "--input", default="-", type=input_file, help="source sentences, one per line; '-' reads stdin (default)"
    )
    parser.add_argument(
        "--output",
        default="-",
        type=output_file_or_stdout,
        help="where translations go, one per line; '-' is stdout (default)",
    )
    parser.add_argument("--batch-size", type=positive_int, default=64, help="sentences per generate call (default 64)")
    parser.add_argument(
        "--num-beams", type=num_beams, default=None, help="beam size; default: the model's generation config (paper: 4)"
    )
    parser.add_argument(
        "--device", default=None, type=device, help="cpu, cuda, cuda:1, ...; default: cuda if available"
    )
    add_engine_arguments(parser)


def _stdin_file() -> str | None:
    """The path of the regular file stdin is redirected from (`< file`), or None for a pipe or a terminal."""
    try:
        if stat.S_ISREG(os.fstat(sys.stdin.fileno()).st_mode):
            link = Path(f"/proc/self/fd/{sys.stdin.fileno()}")  # Linux: names the file
            return os.path.realpath(link) if link.exists() else None
    except (OSError, ValueError, AttributeError):  # no stdin, a closed one, or one without a descriptor
        pass
    return None


def run(args: argparse.Namespace) -> None:
    """Translate the lines and write them; timing and warnings go to stderr, so stdout holds translations only."""
    from ..data.text import read_lines, read_stream_lines, write_lines
    from ..files.outputs import check_output_file, staged_file
    from ..inference.translation import load_translator

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    if args.output != "-":  # before the model loads: the output is no input (stdin redirected from it, too)
        source = ("--input", args.input) if args.input != "-" else ("stdin", _stdin_file())
        model_folder = args.model if Path(args.model).expanduser().is_dir() else None  # else a Hub id
        check_output_file(args.output, [source, ("--model", model_folder)])
    translator = load_translator(args.model, args.engine, args.device, args.dtype)

    lines = read_stream_lines(sys.stdin.buffer, "<stdin>") if args.input == "-" else read_lines(args.input)
    start = time.perf_counter()
    translations = translator.translate(lines, batch_size=args.batch_size, num_beams=args.num_beams)
    seconds = time.perf_counter() - start
    logger.info("translated %d lines in %.1fs on %s (%s)", len(lines), seconds, translator.device, args.engine)

    if args.output == "-":
        broken = write_lines(None, translations)
    else:  # the old file stays until every translation is written (a full disk leaves it whole)
        with staged_file(args.output) as staging:
            broken = write_lines(staging, translations)
    if broken:
        logger.warning("%d translation(s) contained line breaks, written as spaces to keep lines aligned", broken)

"""Translate a file or stdin, line by line, with the paper's decoding (§6.1).

The input is raw text, one sentence per line; the decoding is the model's generation config unless told otherwise.
`--engine ctranslate2` decodes the same way with a CTranslate2 export (`vanilla-transformer export-ctranslate2`).

Line N of the output translates line N of the input: empty lines stay empty, lines end at "\\n" only (CRLF input is
read as LF), and a line break inside a translation becomes a space. With `--num-return-sequences N` (N > 1) each
input line gives N output lines in Moses' n-best format, `LINE ||| TRANSLATION ||| SCORE` (LINE 0-based, SCORE the
beam's log-probability over the GNMT length penalty, best first); an empty input line gives one, `LINE |||  ||| 0.0000`.

The input is translated `--chunk-lines` lines at a time, in bounded memory, each chunk written as it finishes.
`--output FILE` is written as FILE.partial and renamed to FILE at the end (an existing FILE stays whole until then);
a run killed midway leaves FILE.partial, and the same command started again continues after its finished chunks.
"""

import argparse
import logging
import os
import stat
import sys
import time
from contextlib import nullcontext
from itertools import islice
from pathlib import Path

from .arguments import (
    add_engine_arguments,
    device,
    finite_float,
    input_file,
    model_source,
    num_beams,
    output_file_or_stdout,
    positive_int,
)

logger = logging.getLogger("translate")


def add_arguments(parser: argparse.ArgumentParser) -> None:
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
        "--num-beams", type=num_beams, help="beam size; default: the model's generation config (paper: 4)"
    )
    parser.add_argument(
        "--length-penalty",
        type=finite_float,
        help="the GNMT length penalty's α; default: the model's (the paper's 0.6, or the α its release chose on valid)",
    )
    parser.add_argument(
        "--num-return-sequences",
        type=positive_int,
        default=1,
        help="n-best: this many translations per line, with scores, in Moses' n-best format (needs that many beams)",
    )
    parser.add_argument(
        "--chunk-lines",
        type=positive_int,
        default=10_000,
        help="lines read, translated and written at a time (default 10000): bounds memory on large inputs",
    )
    parser.add_argument("--device", type=device, help="cpu, cuda, cuda:1, ...; default: cuda if available")
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
    """Timing, progress and warnings go to stderr: stdout holds translations only."""
    from tqdm.auto import tqdm

    from ..data.text import count_lines, iter_lines
    from ..errors import UsageError
    from ..files.outputs import PARTIAL_SUFFIX, check_output_file, chunked_output, real_path
    from ..inference.translation import load_translator

    nbest = args.num_return_sequences
    if nbest > 1 and args.engine == "ctranslate2":
        raise UsageError("--num-return-sequences gives n-best lists from the pytorch engine only: drop --engine.")
    if args.num_beams is not None and nbest > args.num_beams:
        raise UsageError(f"--num-return-sequences {nbest} needs at least as many beams: give --num-beams {nbest}.")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", stream=sys.stderr)
    source_path = args.input if args.input != "-" else _stdin_file()
    if args.output != "-":  # before the model loads: the output is no input (stdin redirected from it, too)
        source = ("--input", args.input) if args.input != "-" else ("stdin", source_path)
        model_folder = args.model if Path(args.model).expanduser().is_dir() else None  # else a Hub id
        partial = real_path(args.output).with_name(real_path(args.output).name + PARTIAL_SUFFIX)
        for output in (args.output, partial):
            check_output_file(output, [source, ("--model", model_folder)])
    identity = None
    if source_path is not None:  # what a continued run must translate the same way
        status = os.stat(source_path)
        options = ("model", "engine", "dtype", "num_beams", "length_penalty", "num_return_sequences")
        identity = {"input": os.path.realpath(source_path), "size": status.st_size, "mtime_ns": status.st_mtime_ns}
        identity |= {name: getattr(args, name) for name in options}
    translator = load_translator(args.model, args.engine, args.device, args.dtype)
    decoding = {"batch_size": args.batch_size, "num_beams": args.num_beams, "length_penalty": args.length_penalty}

    source = nullcontext(sys.stdin.buffer) if args.input == "-" else open(args.input, "rb")  # noqa: SIM115
    start, translated, broken = time.perf_counter(), 0, 0
    with source as handle, chunked_output(args.output, identity) as output:
        lines = iter_lines(handle, "<stdin>" if args.input == "-" else args.input)
        skipped = sum(1 for _ in islice(lines, output.done))
        total = count_lines(args.input) if args.input != "-" else None
        with tqdm(total=total, initial=skipped, unit=" lines", file=sys.stderr, dynamic_ncols=True) as progress:
            while chunk := list(islice(lines, args.chunk_lines)):
                if nbest > 1:  # (line, text, score) rows; an empty line's one hypothesis, not decoded, scores 0
                    ranked = enumerate(translator.nbest(chunk, nbest, **decoding))
                    rows = [(output.done + line, *best) for line, hypotheses in ranked for best in hypotheses]
                else:
                    rows = [(None, text, None) for text in translator.translate(chunk, **decoding)]
                broken += sum(1 for _, text, _ in rows if "\n" in text or "\r" in text)
                output.write([_output_line(*row) for row in rows], len(chunk))
                translated += len(chunk)
                progress.update(len(chunk))
    seconds = time.perf_counter() - start
    logger.info("translated %d lines in %.1fs on %s (%s)", translated, seconds, translator.device, args.engine)
    if broken:
        logger.warning("%d translation(s) contained line breaks, written as spaces to keep lines aligned", broken)


def _output_line(line: int | None, text: str, score: float | None) -> str:
    """A translation on one output line (a line break inside it would misalign the output with the input); with its
    input `line`, in Moses' n-best format."""
    text = text.replace("\r\n", " ").replace("\n", " ").replace("\r", " ")
    return text if line is None else f"{line} ||| {text} ||| {score or 0.0:.4f}"

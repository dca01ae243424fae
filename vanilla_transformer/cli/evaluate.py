"""Score translations, or a model's translations of a split: sacreBLEU, chrF, tokenized BLEU as JSON.

sacreBLEU and chrF are computed on the raw references and, where the official lowercased Moses-tokenized reference
exists, BLEU on it as the Multi30k literature reports it; the scores print with their signatures.

Scoring a file of translations:
    vanilla-transformer evaluate --hypotheses hyp.de --references test2016.de \\
        [--tokenized-references REF.tok] [--lang de] [--lowercase]
or translating a split with a saved model first:
    vanilla-transformer evaluate --model FOLDER_OR_HUB_ID --split test2016 [--data-dir DIR | --corpus-file cmn.txt]
        [--source-lang en --target-lang de] [--batch-size 64] [--num-beams 4] [--output-hypotheses FILE]
        [--dtype bfloat16] [--engine pytorch|ctranslate2]
"""

import argparse
import json

from ..errors import UsageError
from .arguments import (
    DATA_DIR_HELP,
    add_engine_arguments,
    add_language_arguments,
    existing_dir,
    existing_file,
    model_source,
    num_beams,
    output_file,
    positive_int,
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    source = parser.add_mutually_exclusive_group(required=True)
    source.add_argument("--hypotheses", type=existing_file, help="translations to score, one per line")
    source.add_argument(
        "--model", type=model_source, help="a saved model folder or Hub id whose translations of --split are scored"
    )
    parser.add_argument(
        "--bleu-tokenize",
        choices=["13a", "intl", "char", "none", "zh", "ja-mecab", "ko-mecab", "flores101", "flores200", "spm"],
        help="sacreBLEU's tokenizer; default: the one sacreBLEU picks for the target language (zh, ja-mecab, "
        "ko-mecab, else 13a)",
    )
    scoring = parser.add_argument_group("with --hypotheses")
    scoring.add_argument("--references", type=existing_file, help="the raw (detokenized, cased) references")
    scoring.add_argument("--tokenized-references", type=existing_file, help="lowercased Moses-tokenized references")
    scoring.add_argument(
        "--lang", default="de", help="language of the translations (sacreBLEU's tokenizer for it, Moses rules)"
    )
    scoring.add_argument("--lowercase", action="store_true", help="case-insensitive sacreBLEU and chrF")
    translating = parser.add_argument_group("with --model")
    translating.add_argument("--split", help="the split to translate, e.g. test2016, test2017, valid")
    data = translating.add_mutually_exclusive_group()
    data.add_argument("--data-dir", type=existing_dir, help=DATA_DIR_HELP)
    data.add_argument(
        "--corpus-file",
        type=existing_file,
        help="an Anki/Tatoeba TSV file (English<TAB>translation<TAB>attribution) whose --split (train, valid, test: "
        "the split rule of vanilla_transformer/data/anki.py) is translated",
    )
    add_language_arguments(translating)
    translating.add_argument("--batch-size", type=positive_int, default=64, help="sentences per generate() call")
    translating.add_argument("--num-beams", type=num_beams, default=4, help="beam size (the paper: 4, §6.1)")
    translating.add_argument("--output-hypotheses", type=output_file, help="write the translations to this file")
    add_engine_arguments(translating)


def run(args: argparse.Namespace) -> None:
    if args.hypotheses is not None and args.references is None:
        raise UsageError("--hypotheses needs --references")
    if args.model is not None and args.split is None:
        raise UsageError("--model needs --split")
    from ..data.corpora import corpus_languages
    from ..inference.evaluation import evaluate_model_on_split, recorded_languages
    from ..inference.scoring import score_files

    if args.hypotheses is not None:
        scores = score_files(
            args.hypotheses, args.references, args.tokenized_references, args.lang, args.lowercase, args.bleu_tokenize
        )
    else:
        given = args.source_lang, args.target_lang
        if not all(given) and (recorded := recorded_languages(args.model)):  # the direction the model was made for
            given = args.source_lang or recorded[0], args.target_lang or recorded[1]
        source_lang, target_lang = corpus_languages(args.corpus_file or "", *given)
        scores = evaluate_model_on_split(
            args.model,
            args.split,
            data_dir=args.data_dir,
            source_lang=source_lang,
            target_lang=target_lang,
            batch_size=args.batch_size,
            num_beams=args.num_beams,
            output_hypotheses=args.output_hypotheses,
            engine=args.engine,
            dtype=args.dtype,
            bleu_tokenize=args.bleu_tokenize,
            corpus_file=args.corpus_file,
        )
    print(json.dumps(scores, indent=2, ensure_ascii=False))

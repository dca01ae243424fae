"""A saved model on a test split: translate it and score the output both ways the project reports (`scoring`)."""

import json
from pathlib import Path

from ..data.corpora import load_corpus, sides
from ..data.multi30k import multi30k_dir
from ..data.text import read_lines, write_lines
from ..data.tokenization import lowercases
from ..errors import SettingsError
from ..files.outputs import check_output_file, staged_file
from .scoring import score_translations
from .translation import load_translator


def recorded_languages(name_or_path: str | Path) -> tuple[str, str, Path] | None:
    """(source, target, the file that says so) of the direction a model was trained or released for: a release
    folder's `results.json` (for a Hub id, the copy downloaded with the model), else the `preset.json` of the run a
    `final/` or `checkpoint-N` folder lies in; None where nothing records it."""
    folder = Path(name_or_path).expanduser()
    candidates = [folder / "results.json", folder.parent / "preset.json"]
    if not folder.is_dir():
        from huggingface_hub import try_to_load_from_cache

        try:
            cached = try_to_load_from_cache(str(name_or_path), "results.json")
        except ValueError:  # not a Hub id either
            return None
        candidates = [Path(cached)] if isinstance(cached, str) else []
    for path in candidates:
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            continue
        if not isinstance(record, dict):
            continue
        data, run = (record.get(key) if isinstance(record.get(key), dict) else {} for key in ("data", "run"))
        languages = data.get("languages") if path.name == "results.json" else None
        languages = languages or [run.get("source_lang"), run.get("target_lang")]
        if isinstance(languages, list) and len(languages) == 2 and all(isinstance(lang, str) for lang in languages):
            return languages[0], languages[1], path
    return None


def evaluate_model_on_split(
    model_name_or_path: str,
    split: str,
    data_dir: str | Path | None = None,
    source_lang: str = "en",
    target_lang: str = "de",
    batch_size: int = 64,
    num_beams: int = 4,
    output_hypotheses: str | Path | None = None,
    length_penalty: float | None = None,
    engine: str = "pytorch",
    dtype: str | None = None,
    bleu_tokenize: str | None = None,
    corpus_file: str | Path | None = None,
) -> dict:
    """Translate `{data_dir}/{split}.{source_lang}` (or the `split` of the Anki/Tatoeba TSV `corpus_file`) with a
    saved model and score it against `{split}.{target_lang}` and, when it exists,
    `{data_dir}/tok/{split}.lc.norm.tok.{target_lang}`. `num_beams=4` is the paper's (§6.1); α is the model's unless
    `length_penalty` is given; a model whose tokenizer lowercases is scored case-insensitively.

    `output_hypotheses` that is, holds or lies inside an input is refused before the model loads, and is replaced
    only once every translation is written.
    """
    model_folder = model_name_or_path if Path(model_name_or_path).expanduser().is_dir() else None
    if corpus_file is not None:
        inputs = [("the corpus file", corpus_file)]
        references_path, tokenized_references_path = f"{corpus_file} ({split})", None
    else:
        data_dir = multi30k_dir(data_dir, languages=(source_lang, target_lang))
        sources_path = data_dir / f"{split}.{source_lang}"
        references_path = data_dir / f"{split}.{target_lang}"
        tokenized_references_path = data_dir / "tok" / f"{split}.lc.norm.tok.{target_lang}"
        inputs = [
            ("the source file", sources_path),
            ("the reference file", references_path),
            ("the tokenized reference file", tokenized_references_path),
            ("the data folder", data_dir),
        ]
    if output_hypotheses is not None:
        check_output_file(output_hypotheses, [*inputs, ("the model folder", model_folder)], flag="--output-hypotheses")
    if corpus_file is not None:
        corpus = load_corpus(str(corpus_file), split, source_lang, target_lang)
        sources, references = sides(corpus, source_lang, target_lang)
    else:
        sources, references = read_lines(sources_path), read_lines(references_path)
        if not tokenized_references_path.is_file():
            tokenized_references_path = None
    tokenized_references = read_lines(tokenized_references_path) if tokenized_references_path else None

    translator = load_translator(model_name_or_path, engine, dtype=dtype)
    recorded = recorded_languages(model_name_or_path)  # after loading: a Hub model's files are in the cache then
    if recorded and recorded[:2] != (source_lang, target_lang):
        raise SettingsError(
            f"{model_name_or_path} translates {recorded[0]}→{recorded[1]} ({recorded[2]} records it), not "
            f"{source_lang}→{target_lang}: give --source-lang {recorded[0]} --target-lang {recorded[1]}."
        )
    if length_penalty is None:
        length_penalty = translator.length_penalty
    hypotheses = translator.translate(
        sources, batch_size=batch_size, num_beams=num_beams, length_penalty=length_penalty
    )
    if output_hypotheses is not None:
        with staged_file(output_hypotheses, flag="--output-hypotheses") as staging:
            write_lines(staging, hypotheses)

    lowercase = lowercases(translator.tokenizer)
    scores = score_translations(hypotheses, references, tokenized_references, target_lang, lowercase, bleu_tokenize)
    return {
        "model": model_name_or_path,
        "engine": engine,
        "dtype": dtype or "as saved",
        "split": split,
        "source_lang": source_lang,
        "target_lang": target_lang,
        "num_beams": num_beams,
        "length_penalty": length_penalty,
        "references": str(references_path),
        "tokenized_references": str(tokenized_references_path) if tokenized_references_path else None,
        "hypotheses": str(output_hypotheses) if output_hypotheses is not None else None,
    } | scores

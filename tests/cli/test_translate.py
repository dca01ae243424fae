"""`vanilla-transformer translate` as MT users expect it (issue 56): the length penalty, n-best lists with scores in
Moses' format, and large inputs read, translated and written chunk by chunk, a killed run continuing after the chunks
it finished. The real command on a saved tiny model; the translator is wrapped only to watch the output file between
chunks."""

import re
from pathlib import Path

import pytest
from conftest import tiny_model

import vanilla_transformer.inference.translation as translation
from vanilla_transformer.cli.main import main
from vanilla_transformer.data.corpora import load_builtin
from vanilla_transformer.files.loading import load_model_and_tokenizer
from vanilla_transformer.inference.translation import translate, translate_nbest


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory, builtin_tokenizer) -> Path:
    folder = tmp_path_factory.mktemp("translate") / "tiny-en-de"
    tiny_model(vocab_size=len(builtin_tokenizer)).save_pretrained(folder)
    builtin_tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture
def sources(tmp_path) -> tuple[Path, list[str]]:
    lines = [pair["en"] for pair in load_builtin("test")["translation"][:6]]
    lines.insert(2, "")
    path = tmp_path / "in.en"
    path.write_text("".join(f"{line}\n" for line in lines))
    return path, lines


def run(*argv: str) -> None:
    main(["translate", *argv, "--device", "cpu"])


def test_n_best_lists_give_each_line_its_scored_translations_best_first(model_folder, sources, tmp_path):
    path, lines = sources
    output = tmp_path / "out.nbest"
    run("--model", str(model_folder), "--input", str(path), "--output", str(output), "--num-beams", "4",
        "--num-return-sequences", "3", "--length-penalty", "1.0")  # fmt: skip
    rows = [re.fullmatch(r"(\d+) \|\|\| (.*) \|\|\| (-?\d+\.\d{4})", line) for line in output.read_text().splitlines()]
    assert all(rows)
    by_line: dict[int, list[tuple[str, float]]] = {}
    for row in rows:
        by_line.setdefault(int(row[1]), []).append((row[2], float(row[3])))
    assert sorted(by_line) == list(range(len(lines)))
    assert by_line[2] == [("", 0.0)]  # the empty line: one empty hypothesis, not decoded
    model, tokenizer = load_model_and_tokenizer(model_folder)
    expected = translate_nbest(model, tokenizer, lines, 3, num_beams=4, length_penalty=1.0)
    for index, candidates in by_line.items():
        assert [text for text, _ in candidates] == [hypothesis.text for hypothesis in expected[index]]
        assert [score for _, score in candidates] == [round(hypothesis.score, 4) for hypothesis in expected[index]]
        assert [score for _, score in candidates] == sorted((score for _, score in candidates), reverse=True)
    # the first of each list is the plain translation with the same decoding
    assert [by_line[index][0][0] for index in range(len(lines))] == translate(
        model, tokenizer, lines, num_beams=4, length_penalty=1.0
    )


def test_the_length_penalty_flag_is_the_decodings_alpha(model_folder, sources, tmp_path):
    path, lines = sources
    model, tokenizer = load_model_and_tokenizer(model_folder)
    for alpha in ("0", "3"):
        output = tmp_path / f"out.{alpha}"
        run("--model", str(model_folder), "--input", str(path), "--output", str(output), "--length-penalty", alpha)
        assert output.read_text().splitlines() == translate(model, tokenizer, lines, length_penalty=float(alpha))


@pytest.mark.parametrize(
    ("flags", "words"),
    [
        (["--num-return-sequences", "5", "--num-beams", "4"], "needs at least as many beams: give --num-beams 5"),
        (["--num-return-sequences", "2", "--engine", "ctranslate2"], "pytorch engine only"),
    ],
)
def test_n_best_lists_the_decoding_cannot_give_are_refused_in_one_line(model_folder, flags, words, capsys):
    with pytest.raises(SystemExit) as exited:
        run("--model", str(model_folder), *flags)
    assert exited.value.code == 2 and words in capsys.readouterr().err


def test_a_large_input_is_written_chunk_by_chunk_and_a_killed_run_continues_after_its_chunks(
    model_folder, sources, tmp_path, monkeypatch
):
    path, lines = sources  # 7 lines, 2 a chunk: 4 chunks
    output = tmp_path / "out.de"
    partial = tmp_path / "out.de.partial"
    output.write_text("an earlier translation, kept whole until the new one is complete\n")
    load = translation.load_translator
    seen: list[tuple[list[str], int]] = []  # each chunk, and the lines the output held when it was translated
    kill_at = [3]

    def watched(*args, **kwargs):
        translator = load(*args, **kwargs)

        def translate_chunk(chunk, **decoding):
            seen.append((chunk, len(partial.read_text().splitlines())))
            if len(seen) == kill_at[0]:
                raise KeyboardInterrupt  # the run dies here: what a kill leaves, the chunks written so far
            return translator.translate(chunk, **decoding)

        return translator._replace(translate=translate_chunk)

    monkeypatch.setattr(translation, "load_translator", watched)
    argv = ["--model", str(model_folder), "--input", str(path), "--output", str(output), "--chunk-lines", "2"]
    with pytest.raises(KeyboardInterrupt):
        run(*argv)
    assert [held for _, held in seen] == [0, 2, 4]  # each chunk written before the next is decoded
    assert len(partial.read_text().splitlines()) == 4
    assert output.read_text().startswith("an earlier translation")  # untouched until the end

    kill_at[0] = 0
    seen.clear()
    run(*argv)  # the same command: continues after the 4 lines done
    assert [chunk for chunk, _ in seen] == [lines[4:6], lines[6:]]
    assert [held for _, held in seen] == [4, 6]  # the first chunks are in the file before the last is decoded
    model, tokenizer = load_model_and_tokenizer(model_folder)
    assert output.read_text().splitlines() == translate(model, tokenizer, lines)
    assert not partial.exists() and not (tmp_path / "out.de.partial.json").exists()


def test_a_partial_output_of_other_work_is_refused_not_replaced(model_folder, sources, tmp_path, capsys):
    path, _ = sources
    partial = tmp_path / "out.de.partial"
    partial.write_text("the first half of another file's translation\n")
    record = tmp_path / "out.de.partial.json"
    for damaged in (None, "[]", '{"identity": {}}', "{not json"):  # no record, or one that is not ours
        if damaged is not None:
            record.write_text(damaged)
        with pytest.raises(SystemExit) as exited:
            run("--model", str(model_folder), "--input", str(path), "--output", str(tmp_path / "out.de"))
        assert exited.value.code == 2 and "holds part of an earlier run's output" in capsys.readouterr().err
        assert partial.read_text() == "the first half of another file's translation\n"

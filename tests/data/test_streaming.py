"""`data/streaming.py`: token-budget batches from text files and `datasets` streams, read a buffer at a time."""

import json
import logging
import tracemalloc
from collections import Counter
from pathlib import Path

import pytest
from torch.utils.data import DataLoader
from transformers import DataCollatorForSeq2Seq

from vanilla_transformer.data.streaming import StreamingTokenBatches
from vanilla_transformer.data.text import count_lines, read_lines

MAX_LENGTH, MAX_TOKENS, BUFFER = 24, 100, 37
EMPTY_ROWS, LONG_ROWS, CONTROL_ROWS = (5, 50, 51), (7, 70), (9,)
WORDS = ["the", "house", "is", "small", "a", "dog", "sees", "cat", "big", "red"]


def corpus_pairs(count: int = 150) -> list[tuple[str, str]]:
    """Distinct pairs of varied lengths, with empty sides, over-long pairs and a mostly-control-character one."""
    pairs = []
    for i in range(max(count, 150)):
        words = " ".join(WORDS[(i + k) % len(WORDS)] for k in range(i % 7 + 1))
        pairs.append((f"{words} {i}", f"{i} {words} ende"))
    for row in EMPTY_ROWS:
        pairs[row] = ("", "x") if row % 2 else ("y", "   ")
    for row in LONG_ROWS:
        pairs[row] = (" ".join(WORDS * 3), "kurz")
    for row in CONTROL_ROWS:
        pairs[row] = ("\x01\x02\x03\x04 a", "b")
    return pairs[:count]


def write_text(folder: Path, pairs: list[tuple[str, str]], split: str = "train") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for side, lang in enumerate(("en", "de")):
        (folder / f"{split}.{lang}").write_text("".join(pair[side] + "\n" for pair in pairs), encoding="utf-8")
    return folder


def write_json(folder: Path, pairs: list[tuple[str, str]], columns: bool) -> list[str]:
    """The pairs in two JSON-lines files (two shards of the stream), as one column per language or `translation`."""
    folder.mkdir(parents=True, exist_ok=True)
    files = []
    for part, rows in enumerate((pairs[:60], pairs[60:])):
        path = folder / f"part{part}.jsonl"
        lines = [{"en": s, "de": t} if columns else {"translation": {"en": s, "de": t}, "id": 1} for s, t in rows]
        path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
        files.append(str(path))
    return files


def make_stream(corpus, tokenizer, data_files=None, **settings) -> StreamingTokenBatches:
    settings = {"max_tokens": MAX_TOKENS, "max_length": MAX_LENGTH, "buffer_pairs": BUFFER, **settings}
    if data_files is not None:
        return StreamingTokenBatches("json", tokenizer, data_files=data_files, **settings)
    return StreamingTokenBatches(corpus, tokenizer, **settings)


def key(example: dict) -> tuple:
    return tuple(example["input_ids"]), tuple(example["labels"])


def expected_keys(tokenizer, pairs: list[tuple[str, str]]) -> Counter:
    """What `tokenize_pairs` keeps of `pairs`, as (input_ids, labels) keys."""
    kept = [(s, t) for s, t in pairs if s.strip() and t.strip()]
    encoded = tokenizer([s for s, _ in kept], text_target=[t for _, t in kept], split_special_tokens=True)
    keys = zip(map(tuple, encoded["input_ids"]), map(tuple, encoded["labels"]), strict=True)
    return Counter(k for k in keys if len(k[0]) <= MAX_LENGTH and len(k[1]) <= MAX_LENGTH)


def epochs(stream: StreamingTokenBatches, count: int) -> list[list[list[dict]]]:
    """The batches of the stream's first `count` epochs, one list per epoch."""
    batches = [[] for _ in range(count)]
    for batch in stream:
        if stream.epoch == count:
            return batches
        batches[stream.epoch].append(batch)


def run(stream: StreamingTokenBatches, count: int) -> tuple[list, list[dict]]:
    """The stream's next `count` batches and its state after each."""
    batches, states = [], []
    for batch in stream:
        batches.append(batch)
        states.append(json.loads(json.dumps(stream.state_dict())))  # as a checkpoint holds it
        if len(batches) == count:
            return batches, states


def padded_size(batch: list[dict]) -> int:
    return len(batch) * (max(len(e["input_ids"]) for e in batch) + max(len(e["labels"]) for e in batch))


@pytest.fixture(scope="module")
def text_corpus(tmp_path_factory) -> Path:
    return write_text(tmp_path_factory.mktemp("text"), corpus_pairs())


@pytest.mark.parametrize("source", ["text", "json-columns", "json-translation"])
def test_every_kept_pair_once_per_epoch_across_ranks_within_budget(builtin_tokenizer, text_corpus, tmp_path, source):
    pairs = corpus_pairs()
    files = None if source == "text" else write_json(tmp_path, pairs, columns=source == "json-columns")
    expected = expected_keys(builtin_tokenizer, pairs)
    assert len(expected) == len(pairs) - len(EMPTY_ROWS) - len(LONG_ROWS)  # the corpus exercises both drops
    for world_size in (1, 2):
        per_epoch = [Counter(), Counter()]
        orders = []
        for rank in range(world_size):
            stream = make_stream(text_corpus, builtin_tokenizer, files, rank=rank, world_size=world_size)
            for epoch, batches in enumerate(epochs(stream, 2)):
                assert all(0 < padded_size(batch) <= MAX_TOKENS for batch in batches)
                per_epoch[epoch].update(key(example) for batch in batches for example in batch)
                orders.append([key(example) for batch in batches for example in batch])
        assert per_epoch[0] == per_epoch[1] == expected  # each kept pair once per epoch, over all ranks together
        assert orders[0] != orders[1]  # epochs (or ranks) differ in order


def test_drops_are_counted_and_logged(builtin_tokenizer, text_corpus, caplog):
    stream = make_stream(text_corpus, builtin_tokenizer)
    with caplog.at_level(logging.INFO, logger="vanilla_transformer.data.streaming"):
        batches, states = run(stream, 60)
    last = max(i for i, state in enumerate(states) if state["epoch"] == 0)
    report = states[last]["report"]  # after the last batch of epoch 0: the whole pass's counts
    kept = sum(map(len, batches[: last + 1]))
    assert report["kept"] == kept == len(corpus_pairs()) - len(EMPTY_ROWS) - len(LONG_ROWS)
    assert (report["empty"], report["too_long"], report["not_text"]) == (3, 2, 1)
    assert report["rows"] == {"empty": list(EMPTY_ROWS), "too_long": list(LONG_ROWS), "not_text": list(CONTROL_ROWS)}
    message = f"kept {kept} pairs; dropped 3 with an empty side (rows [5, 50, 51]) and 2 over the length limit"
    assert any(message in record.getMessage() and record.levelno == logging.WARNING for record in caplog.records)


def test_text_files_and_a_datasets_stream_of_the_same_pairs_give_the_same_batches(
    builtin_tokenizer, text_corpus, tmp_path
):
    files = write_json(tmp_path, corpus_pairs(), columns=False)
    from_text = epochs(make_stream(text_corpus, builtin_tokenizer, seed=3), 2)
    from_json = epochs(make_stream(None, builtin_tokenizer, files, seed=3), 2)
    assert from_text == from_json


def cut_points(states: list[dict]) -> dict[str, int]:
    """Batches after which to stop: mid-buffer, at a buffer boundary, at the end of the epoch (the next buffer is
    past the end of the stream) and just after it."""
    points = {
        "mid-buffer": next(i for i, s in enumerate(states) if s["taken"] > 0 and s["buffer"] > 0),
        "buffer boundary": next(i for i, s in enumerate(states) if s["taken"] == 0 and s["buffer"] > 0),
    }
    first_of_next = next(i for i, s in enumerate(states) if s["epoch"] == 1)
    points["epoch boundary"] = first_of_next - 1
    points["first batch of the next epoch"] = first_of_next
    return points


@pytest.mark.parametrize("source", ["text", "json"])
@pytest.mark.parametrize("rank", [0, 1])
def test_resume_continues_exactly_where_the_state_was_saved(builtin_tokenizer, text_corpus, tmp_path, source, rank):
    files = None if source == "text" else write_json(tmp_path, corpus_pairs(), columns=True)
    settings = {"rank": rank, "world_size": 2, "seed": 7}
    batches, states = run(make_stream(text_corpus, builtin_tokenizer, files, **settings), 60)
    points = cut_points(states)
    assert states[points["epoch boundary"]]["epoch"] == 0 and states[-1]["epoch"] >= 1
    for where, cut in points.items():
        resumed = make_stream(text_corpus, builtin_tokenizer, files, **settings)
        resumed.load_state_dict(states[cut])
        following, _ = run(resumed, 12)
        assert following == batches[cut + 1 : cut + 13], where


def test_resume_at_every_batch_of_two_epochs_of_text(builtin_tokenizer, text_corpus):
    batches, states = run(make_stream(text_corpus, builtin_tokenizer), 100)
    assert states[-1]["epoch"] >= 1
    resumed = make_stream(text_corpus, builtin_tokenizer)
    for cut in range(len(batches) - 1):
        resumed.load_state_dict(states[cut])
        assert next(iter(resumed)) == batches[cut + 1], cut


def test_a_state_of_another_corpus_or_settings_is_refused(builtin_tokenizer, tmp_path):
    folder = write_text(tmp_path, corpus_pairs(40))
    stream = make_stream(folder, builtin_tokenizer)
    next(iter(stream))
    state = stream.state_dict()
    with pytest.raises(ValueError, match="seed: saved 0, now 1"):
        make_stream(folder, builtin_tokenizer, seed=1).load_state_dict(state)
    with pytest.raises(ValueError, match="rank: saved 0, now 1.*world_size: saved 1, now 2"):
        make_stream(folder, builtin_tokenizer, rank=1, world_size=2).load_state_dict(state)
    with pytest.raises(ValueError, match="max_tokens: saved 100, now 120"):
        make_stream(folder, builtin_tokenizer, max_tokens=120).load_state_dict(state)
    with open(folder / "train.en", "a") as handle, open(folder / "train.de", "a") as other:
        handle.write("one more\n")
        other.write("noch einer\n")
    with pytest.raises(ValueError, match="files: saved"):
        make_stream(folder, builtin_tokenizer).load_state_dict(state)


def test_a_collator_pads_its_batches_in_a_data_loader(builtin_tokenizer, text_corpus, monkeypatch):
    stream = make_stream(text_corpus, builtin_tokenizer)
    raw = next(iter(make_stream(text_corpus, builtin_tokenizer)))
    loader = DataLoader(stream, batch_size=None, collate_fn=DataCollatorForSeq2Seq(builtin_tokenizer))
    batch = next(iter(loader))
    assert set(batch) >= {"input_ids", "attention_mask", "labels"}
    assert batch["input_ids"].numel() + batch["labels"].numel() <= MAX_TOKENS
    assert batch["attention_mask"].sum(1).tolist() == [len(example["input_ids"]) for example in raw]
    assert batch["labels"].ne(-100).sum(1).tolist() == [len(example["labels"]) for example in raw]
    # in a DataLoader worker (faked: a real one costs a process and seconds) it refuses to run
    monkeypatch.setattr("vanilla_transformer.data.streaming.get_worker_info", lambda: object())
    with pytest.raises(RuntimeError, match="num_workers=0"):
        next(iter(stream))


def test_lines_are_read_as_read_lines_reads_them(builtin_tokenizer, tmp_path):
    """CRLF line ends, a byte-order mark at the start of the file (dropped) and at the start of a later line (kept),
    a Unicode line separator and a form feed inside a line: the stream's pairs are `read_lines`'s, also where a
    buffer begins mid-file."""
    sources = ["one house", "two\u2028houses", "\ufeffthree houses", "four\x0choses", "five"]
    targets = ["ein haus", "zwei häuser", "drei", "vier\u2029häuser", "fünf"]
    (tmp_path / "train.en").write_bytes(("\ufeff" + "\r\n".join(sources) + "\r\n").encode())
    (tmp_path / "train.de").write_bytes(("\ufeff" + "\n".join(targets)).encode())  # no final line end
    pairs = list(zip(read_lines(tmp_path / "train.en"), read_lines(tmp_path / "train.de"), strict=True))
    assert pairs[0] == ("one house", "ein haus") and pairs[2][0] == "\ufeffthree houses" and len(pairs) == 5
    stream = make_stream(tmp_path, builtin_tokenizer, buffer_pairs=2)
    got = Counter(key(example) for batch in epochs(stream, 1)[0] for example in batch)
    assert got == expected_keys(builtin_tokenizer, pairs)
    # resumed from byte offsets (line 3 begins a buffer): its mark is still kept, line numbers still count from 1
    batches, states = run(make_stream(tmp_path, builtin_tokenizer, buffer_pairs=2), 8)
    resumed = make_stream(tmp_path, builtin_tokenizer, buffer_pairs=2)
    for cut in range(len(batches) - 1):
        resumed.load_state_dict(states[cut])
        assert next(iter(resumed)) == batches[cut + 1], cut


def test_a_line_that_is_not_utf8_is_named(builtin_tokenizer, tmp_path):
    (tmp_path / "train.en").write_bytes(b"a\nb\nc\nd\n")
    (tmp_path / "train.de").write_bytes(b"a\nb\nc\xe9\nd\n")
    stream = iter(make_stream(tmp_path, builtin_tokenizer, buffer_pairs=2))
    next(stream)  # the first buffer, lines 1 and 2, is read before line 3
    with pytest.raises(ValueError, match=r"train\.de, line 3: not UTF-8"):
        next(stream)


def test_files_of_different_line_counts_are_refused_before_a_pair_is_read(builtin_tokenizer, tmp_path):
    # a line lost in the middle of one side: every later pair would be misaligned until the end of the file
    lines = [f"sentence number {i}\n" for i in range(300)]
    (tmp_path / "train.en").write_text("".join(lines))
    (tmp_path / "train.de").write_text("".join(lines[:100] + lines[101:]))
    with pytest.raises(ValueError, match=r"train\.en has 300 lines but .*train\.de has 299: .* line-aligned"):
        make_stream(tmp_path, builtin_tokenizer)
    (tmp_path / "train.de").write_text("".join(lines).removesuffix("\n"))  # no final line end: still 300 lines
    assert count_lines(tmp_path / "train.de") == 300 == len(read_lines(tmp_path / "train.de"))
    make_stream(tmp_path, builtin_tokenizer)


def test_a_buffer_smaller_than_one_batch_is_warned_of(builtin_tokenizer, text_corpus, caplog):
    next(iter(make_stream(text_corpus, builtin_tokenizer, buffer_pairs=1)))
    assert "a stream buffer of 1 pairs holds" in caplog.text and "raise --stream-buffer-pairs" in caplog.text
    caplog.clear()
    next(iter(make_stream(text_corpus, builtin_tokenizer)))
    assert "stream buffer" not in caplog.text


def test_a_corpus_without_usable_pairs_raises_instead_of_looping(builtin_tokenizer, tmp_path):
    write_text(tmp_path, [("", "a"), ("b", " "), (" ".join(WORDS * 3), "c")])
    with pytest.raises(ValueError, match="no usable pair: kept 0 pairs; dropped 2 with an empty side"):
        next(iter(make_stream(tmp_path, builtin_tokenizer)))
    write_text(tmp_path, [("a house", "ein haus")])
    with pytest.raises(ValueError, match="gave rank 1 of 2 no batch"):
        next(iter(make_stream(tmp_path, builtin_tokenizer, rank=1, world_size=2)))


def test_settings_are_checked_where_they_enter(builtin_tokenizer, text_corpus):
    with pytest.raises(ValueError, match="max_tokens=40 is smaller than a pair of max_length=24"):
        make_stream(text_corpus, builtin_tokenizer, max_tokens=40)
    with pytest.raises(ValueError, match="rank=2, world_size=2"):
        make_stream(text_corpus, builtin_tokenizer, rank=2, world_size=2)
    with pytest.raises(ValueError, match="has no split 'test'"):
        make_stream(text_corpus, builtin_tokenizer, split="test")
    with pytest.raises(ValueError, match="is a file"):
        make_stream(text_corpus / "train.en", builtin_tokenizer)
    with pytest.raises(ValueError, match="built-in corpus is generated in memory"):
        make_stream("builtin", builtin_tokenizer)


def test_multi30k_by_name_streams_its_official_files(builtin_tokenizer, multi30k):
    stream = make_stream("multi30k", builtin_tokenizer, max_length=64, max_tokens=2000, buffer_pairs=500)
    assert stream.settings["files"] == {name: (multi30k / name).stat().st_size for name in ("train.en", "train.de")}
    assert all(padded_size(batch) <= 2000 for batch in run(stream, 3)[0])


@pytest.fixture(scope="module")
def word_tokenizer():
    """A word-level tokenizer of `LONG_WORDS` and the numbers below 200: one id per word, however long, so that a pass
    over lines of many characters is quick (the memory test measures memory, not tokenization)."""
    from tokenizers import Tokenizer, models, pre_tokenizers, processors
    from transformers import PreTrainedTokenizerFast

    vocab = {token: i for i, token in enumerate(["<pad>", "<s>", "</s>", "<unk>", *LONG_WORDS, *map(str, range(200))])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    backend.post_processor = processors.TemplateProcessing(single="$A </s>", special_tokens=[("</s>", 2)])
    specials = {"pad_token": "<pad>", "bos_token": "<s>", "eos_token": "</s>", "unk_token": "<unk>"}
    return PreTrainedTokenizerFast(tokenizer_object=backend, **specials)


LONG_WORDS = [word * (40 // len(word)) for word in WORDS]


def long_line_pairs(folder: Path, count: int) -> Path:
    """`count` pairs of about 170 characters a side, one in ten with an empty side."""
    pairs = []
    for i in range(count):
        words = " ".join(LONG_WORDS[(i * k) % 10] for k in range(4))
        pairs.append((f"{words} {i % 200}", f"{i % 200} {words}" if i % 10 else ""))
    return write_text(folder, pairs)


def pass_peak(folder: Path, tokenizer) -> int:
    """The peak of the Python heap (tracemalloc: Python objects and numpy arrays, not the tokenizer's Rust memory)
    over one pass of a stream with a 50-pair buffer, above what it was before."""
    stream = make_stream(folder, tokenizer, buffer_pairs=50, max_tokens=100, max_length=12)
    tracemalloc.start()
    try:
        baseline = tracemalloc.get_traced_memory()[0]
        for _ in stream:
            if stream.epoch == 1:
                break
        peak = tracemalloc.get_traced_memory()[1] - baseline
    finally:
        tracemalloc.stop()
    return peak


def test_memory_is_bounded_by_the_buffer_not_the_corpus(word_tokenizer, tmp_path):
    """Passes over 500 and 4000 pairs with a 50-pair buffer: the peak grows by a few percent of what the extra pairs
    cost read whole (their ids alone, as 16-bit arrays, would be 10%), and stays far below the 4000 read whole."""
    small, large = long_line_pairs(tmp_path / "small", 500), long_line_pairs(tmp_path / "large", 4_000)
    loaded = {}
    for folder in (small, large):
        tracemalloc.start()
        try:
            lines = read_lines(folder / "train.en"), read_lines(folder / "train.de")
            loaded[folder] = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        del lines
    small_peak, large_peak = pass_peak(small, word_tokenizer), pass_peak(large, word_tokenizer)
    summary = (
        f"peaks {small_peak / 1e6:.2f} MB (500 pairs) and {large_peak / 1e6:.2f} MB (4000 pairs); read whole, "
        f"{loaded[small] / 1e6:.2f} MB and {loaded[large] / 1e6:.2f} MB"
    )
    # not zero: numpy keeps freed small arrays for reuse (tracemalloc counts them), a cache that fills and levels off
    assert large_peak - small_peak < 0.05 * (loaded[large] - loaded[small]), summary
    assert 8 * large_peak < loaded[large], summary

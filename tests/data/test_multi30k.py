"""Multi30k by name (`vanilla_transformer.data.multi30k`): found where it is, else downloaded once over real HTTP
(a loopback server with the official repository's layout and small stand-in files), checked, and stored whole or
not at all; the cache is checked again before each use."""

import gzip
import hashlib
import http.server
import json
import logging
import os
import threading
from pathlib import Path

import pytest

from vanilla_transformer.data import multi30k as module
from vanilla_transformer.data.corpora import load_corpus
from vanilla_transformer.data.multi30k import (
    COMMIT,
    GUNZIPPED,
    RECORD,
    SERVED,
    holds_multi30k,
    local_name,
    multi30k_dir,
)
from vanilla_transformer.errors import Multi30kUnavailable

# stand-ins for the repository's files under data/task1/: two splits of each kind, English and German
FAKE = {
    "raw/train.en.gz": gzip.compress(b"A dog runs.\nTwo men talk.\n", mtime=0),
    "raw/train.de.gz": gzip.compress("Ein Hund läuft.\nZwei Männer reden.\n".encode(), mtime=0),
    "raw/val.en.gz": gzip.compress(b"A cat sleeps.\n", mtime=0),
    "raw/val.de.gz": gzip.compress(b"Eine Katze schl\xc3\xa4ft.\n", mtime=0),
    "tok/train.lc.norm.tok.en": b"a dog runs .\ntwo men talk .\n",
    "tok/train.lc.norm.tok.de": "ein hund läuft .\nzwei männer reden .\n".encode(),
    "tok/val.lc.norm.tok.en": b"a cat sleeps .\n",
    "tok/val.lc.norm.tok.de": "eine katze schläft .\n".encode(),
}
LAYOUT = sorted(
    ["train.en", "train.de", "valid.en", "valid.de"]
    + [f"tok/{split}.lc.norm.tok.{lang}" for split in ("train", "valid") for lang in ("en", "de")]
)


class Repository(http.server.ThreadingHTTPServer):
    """raw.githubusercontent.com on 127.0.0.1: `files` at /<commit>/data/task1/<path>, a 404 for anything else;
    `cut_short` names files whose connection closes halfway; `requests` counts what was asked."""

    def __init__(self) -> None:
        self.files = {f"/{COMMIT}/data/task1/{path}": data for path, data in FAKE.items()}
        self.cut_short: set[str] = set()
        self.requests: list[str] = []
        super().__init__(("127.0.0.1", 0), RepositoryHandler)
        self.url = f"http://127.0.0.1:{self.server_port}"


class RepositoryHandler(http.server.BaseHTTPRequestHandler):
    server: Repository

    def do_GET(self) -> None:
        self.server.requests.append(self.path)
        if self.path not in self.server.files:
            self.send_error(404)
            return
        body = self.server.files[self.path]
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        # HTTP/1.0: the connection closes after this, before the announced length when cut short
        self.wfile.write(body[: len(body) // 2] if self.path in self.server.cut_short else body)

    def log_message(self, *args) -> None:  # keep the test output quiet
        pass


@pytest.fixture
def repository():
    server = Repository()
    # a short poll interval: shutdown() waits for the loop's next look, 0.5 s by default
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    """An empty cache, no Multi30k folder named by the environment, and the module checking the stand-in files."""
    monkeypatch.setenv("VANILLA_TRANSFORMER_CACHE", str(tmp_path / "cache"))
    monkeypatch.delenv("VANILLA_TRANSFORMER_MULTI30K", raising=False)
    monkeypatch.delenv("VANILLA_TRANSFORMER_MULTI30K_URL", raising=False)
    monkeypatch.setattr(module, "SERVED", {path: (len(data), sha256(data)) for path, data in FAKE.items()})
    gunzipped = {local_name(path): gzip.decompress(data) for path, data in FAKE.items() if path.endswith(".gz")}
    monkeypatch.setattr(module, "GUNZIPPED", {name: (len(data), sha256(data)) for name, data in gunzipped.items()})
    return tmp_path / "cache"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def files_in(folder: Path) -> list[str]:
    """The data files of `folder`: all but the record of checked files."""
    return sorted(str(path.relative_to(folder)) for path in folder.rglob("*") if path.is_file() and path.name != RECORD)


def record_of(folder: Path) -> dict[str, list]:
    return json.loads((folder / RECORD).read_text())["files"]


def test_the_first_call_downloads_into_the_cache_in_the_folder_layout_and_later_calls_reuse_it(repository, cache):
    folder = multi30k_dir(base_url=repository.url)
    assert folder == cache / f"multi30k-{COMMIT[:8]}" and list(cache.iterdir()) == [folder]
    assert files_in(folder) == LAYOUT
    # every file recorded as checked: its size, mtime and the sha256 it was checked against
    assert record_of(folder) == {
        name: [(folder / name).stat().st_size, (folder / name).stat().st_mtime_ns, sha256((folder / name).read_bytes())]
        for name in LAYOUT
    }
    assert (folder / "valid.de").read_text() == "Eine Katze schläft.\n"  # gunzipped
    assert (folder / "tok" / "train.lc.norm.tok.en").read_bytes() == FAKE["tok/train.lc.norm.tok.en"]
    assert len(repository.requests) == len(FAKE)
    assert multi30k_dir(base_url=repository.url) == multi30k_dir(download=False) == folder
    assert len(repository.requests) == len(FAKE)


def test_multi30k_by_name_downloads_from_the_url_the_environment_gives(repository, cache, monkeypatch):
    monkeypatch.setenv("VANILLA_TRANSFORMER_MULTI30K_URL", repository.url + "/")
    assert load_corpus("multi30k", "train")["translation"] == [
        {"en": "A dog runs.", "de": "Ein Hund läuft."},
        {"en": "Two men talk.", "de": "Zwei Männer reden."},
    ]
    assert files_in(cache / f"multi30k-{COMMIT[:8]}") == LAYOUT


@pytest.mark.parametrize(
    "fault, got",
    [
        ("cut short", "got IncompleteRead"),
        ("corrupted", f"got {len(FAKE['raw/val.de.gz'])} bytes with sha256 "),
        ("missing", "got HTTP 404"),
    ],
    ids=["cut short", "corrupted", "missing"],
)
def test_a_failed_download_names_the_file_and_url_and_leaves_nothing_in_the_cache(repository, cache, fault, got):
    path = "raw/val.de.gz"  # the fourth file: the three before it arrive whole
    url_path = f"/{COMMIT}/data/task1/{path}"
    if fault == "cut short":
        repository.cut_short.add(url_path)
    elif fault == "corrupted":
        repository.files[url_path] = bytes(reversed(FAKE[path]))
    else:
        del repository.files[url_path]
    with pytest.raises(Multi30kUnavailable) as error:
        multi30k_dir(base_url=repository.url)
    message = str(error.value)
    assert f"Multi30k's {path} from {repository.url}{url_path} failed" in message
    assert f"expected {len(FAKE[path])} bytes with sha256 {sha256(FAKE[path])}, {got}" in message
    assert f"into {cache / f'multi30k-{COMMIT[:8]}'} by hand" in message and "VANILLA_TRANSFORMER_MULTI30K" in message
    assert list(cache.iterdir()) == []
    # the next try starts afresh
    repository.cut_short.clear()
    repository.files[url_path] = FAKE[path]
    assert files_in(multi30k_dir(base_url=repository.url)) == LAYOUT


def test_without_download_an_empty_cache_says_how_to_get_the_files(cache):
    with pytest.raises(Multi30kUnavailable) as error:
        multi30k_dir(download=False)
    message = str(error.value)
    assert "8 files missing" in message and "(download=False)" in message
    assert "vanilla-transformer download-multi30k" in message and "set VANILLA_TRANSFORMER_MULTI30K" in message
    assert "val as valid, test_2016_flickr as test2016" in message
    with pytest.raises(ValueError, match="Multi30k has no xx files"):
        multi30k_dir(download=False, languages=("en", "xx"))


def test_a_cache_variable_naming_a_file_is_refused_naming_the_variable(cache, monkeypatch):
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("not a folder\n")
    with pytest.raises(ValueError, match=r"VANILLA_TRANSFORMER_CACHE=\S*cache is a file, not a folder: point"):
        multi30k_dir(download=False)
    assert cache.read_text() == "not a folder\n"


@pytest.mark.parametrize("variable", ["HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE"])
def test_offline_mode_keeps_off_the_official_url_but_not_a_given_one(repository, cache, monkeypatch, variable):
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.setenv(variable, "1")
    with pytest.raises(Multi30kUnavailable, match=f"{variable} is set, so nothing is downloaded"):
        multi30k_dir()
    assert files_in(multi30k_dir(base_url=repository.url)) == LAYOUT


def test_a_folder_given_or_named_by_the_environment_wins_over_the_cache(repository, cache, tmp_path, monkeypatch):
    multi30k_dir(base_url=repository.url)
    mine, given = tmp_path / "mine", tmp_path / "given"
    for folder in (mine, given):
        folder.mkdir()
        (folder / "test2016.en").write_text("A dog.\n")
        (folder / "test2016.de").write_text("Ein Hund.\n")
    monkeypatch.setenv("VANILLA_TRANSFORMER_MULTI30K", str(mine))
    assert multi30k_dir() == mine and multi30k_dir(given) == given
    (mine / "test2016.de").unlink()
    with pytest.raises(Multi30kUnavailable, match=f"VANILLA_TRANSFORMER_MULTI30K={mine} holds no {{split}}.de files"):
        multi30k_dir()
    with pytest.raises(Multi30kUnavailable, match=f"data_dir={tmp_path / 'nowhere'} is not a folder"):
        multi30k_dir(tmp_path / "nowhere")
    assert len(repository.requests) == len(FAKE)


DAMAGES = {
    # what a cached file can suffer after it was checked, and what the check then says of valid.de (21 bytes)
    # (the edit: "Eine Katze" → "eine Katze")
    "emptied": (lambda data: b"", "has 0 bytes, expected 21"),
    "cut short": (lambda data: data[:-5], "has 16 bytes, expected 21"),
    "edited, same size": (lambda data: data[:1].swapcase() + data[1:], "has sha256 "),
}


def damage(folder: Path, name: str, how: str) -> bytes:
    """Change `folder/name` the way `how` says, as an editor would (a new mtime), and return its good bytes."""
    good = (folder / name).read_bytes()
    (folder / name).write_bytes(DAMAGES[how][0](good))
    stat = (folder / name).stat()
    os.utime(folder / name, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))  # even where mtime ticks coarsely
    return good


@pytest.mark.parametrize("how", list(DAMAGES))
def test_a_cache_file_damaged_after_the_download_is_downloaded_again_with_a_warning(repository, cache, how, caplog):
    folder = multi30k_dir(base_url=repository.url)
    good = damage(folder, "valid.de", how)
    with caplog.at_level(logging.WARNING, logger=module.__name__):
        assert multi30k_dir(base_url=repository.url) == folder
    assert repository.requests[len(FAKE) :] == [f"/{COMMIT}/data/task1/raw/val.de.gz"]  # that file alone, again
    assert (folder / "valid.de").read_bytes() == good and files_in(folder) == LAYOUT
    assert f"downloading damaged Multi30k files in {folder} again: valid.de {DAMAGES[how][1]}" in caplog.text
    assert record_of(folder)["valid.de"][:2] == [len(good), (folder / "valid.de").stat().st_mtime_ns]
    # repaired and recorded: the next call finds nothing to do
    assert multi30k_dir(download=False) == folder and len(repository.requests) == len(FAKE) + 1


@pytest.mark.parametrize("offline", ["download=False", "HF_HUB_OFFLINE"])
@pytest.mark.parametrize("how", list(DAMAGES))
def test_offline_a_damaged_cache_file_is_refused_naming_it_what_is_wrong_and_the_fix(
    repository, cache, how, offline, monkeypatch
):
    folder = multi30k_dir(base_url=repository.url)
    damage(folder, "tok/valid.lc.norm.tok.de", "emptied")
    damage(folder, "valid.de", how)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1" if offline == "HF_HUB_OFFLINE" else "0")
    with pytest.raises(Multi30kUnavailable) as error:
        multi30k_dir(download=offline != "download=False")
    message = str(error.value)
    reason = "download=False" if offline == "download=False" else "HF_HUB_OFFLINE is set, so nothing is downloaded"
    assert message.startswith(f"Multi30k's cache {folder} holds damaged files ({reason}): valid.de {DAMAGES[how][1]}")
    if how == "edited, same size":
        assert f"expected {sha256(gzip.decompress(FAKE['raw/val.de.gz']))}" in message
    assert "; tok/valid.lc.norm.tok.de has 0 bytes, expected 22. Re-run where" in message
    assert "downloads them again" in message and "set VANILLA_TRANSFORMER_MULTI30K to a folder" in message
    assert "\n" not in message
    assert len(repository.requests) == len(FAKE)
    # nothing damaged is ever recorded as checked: refused again, then repaired once the network is there
    with pytest.raises(Multi30kUnavailable, match="holds damaged files"):
        multi30k_dir(download=False)
    assert "valid.de" not in record_of(folder)
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")
    multi30k_dir(base_url=repository.url)
    assert len(repository.requests) == len(FAKE) + 2 and multi30k_dir(download=False) == folder


def test_an_unchanged_cache_file_is_not_hashed_again_and_a_touched_one_is(repository, cache):
    """The sha256 of a cached file is computed again only when its size or mtime changed since it was checked: shown
    by an edit that keeps both (its mtime set back), which only a read of the file could catch and which passes."""
    folder = multi30k_dir(base_url=repository.url)
    record = (folder / RECORD).stat()
    checked = record_of(folder)["train.en"]
    assert multi30k_dir(download=False) == folder
    assert (folder / RECORD).stat().st_mtime_ns == record.st_mtime_ns  # nothing new: the record is not rewritten

    stat = (folder / "train.en").stat()
    (folder / "train.en").write_bytes((folder / "train.en").read_bytes().replace(b"dog", b"cat"))
    os.utime(folder / "train.en", ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert multi30k_dir(download=False) == folder  # not read: the record vouches for it
    assert record_of(folder)["train.en"] == checked

    # the same edit with its new mtime is read, refused, and dropped from the record
    os.utime(folder / "train.en", ns=(stat.st_atime_ns, stat.st_mtime_ns + 1))
    with pytest.raises(Multi30kUnavailable, match="train.en has sha256 "):
        multi30k_dir(download=False)
    assert "train.en" not in record_of(folder)

    # good bytes with a new mtime (a copy, a `touch`) are hashed, pass and are recorded with that mtime
    (folder / "train.en").write_bytes(gzip.decompress(FAKE["raw/train.en.gz"]))
    assert multi30k_dir(download=False) == folder
    assert record_of(folder)["train.en"] == [checked[0], (folder / "train.en").stat().st_mtime_ns, checked[2]]


@pytest.mark.parametrize("record", ["missing", "garbled"])
def test_a_cache_without_a_readable_record_is_hashed_whole_and_recorded_again(repository, cache, record):
    """A cache filled before the record existed, or whose record is garbled, is checked file by file once."""
    folder = multi30k_dir(base_url=repository.url)
    expected = record_of(folder)
    if record == "missing":
        (folder / RECORD).unlink()
    else:
        (folder / RECORD).write_text('{"files": [')
    damage(folder, "tok/train.lc.norm.tok.en", "edited, same size")
    with pytest.raises(Multi30kUnavailable, match=r"tok/train.lc.norm.tok.en has sha256 \w+, expected"):
        multi30k_dir(download=False)
    expected.pop("tok/train.lc.norm.tok.en")
    assert record_of(folder) == expected  # all but the damaged file hashed and recorded again


def test_the_pinned_table_covers_every_split_and_language_once():
    assert {local_name(path) for path in SERVED if path.startswith("raw/")} == set(GUNZIPPED)
    splits = {name.split(".")[0] for name in GUNZIPPED}
    assert splits == {"train", "valid", "test2016", "test2017", "test2018", "mscoco2017"}
    for lang in ("en", "de", "fr"):
        assert {f"{split}.{lang}" for split in splits} <= set(GUNZIPPED)
        assert {f"tok/{split}.lc.norm.tok.{lang}" for split in splits} <= {local_name(path) for path in SERVED}


def test_the_pinned_sums_are_those_of_the_official_files(multi30k):
    """The files of a Multi30k folder have the sums pinned for the download (gunzipped, for the raw files)."""
    checked = []
    for path, served in SERVED.items():
        name = local_name(path)
        if (multi30k / name).is_file():
            data = (multi30k / name).read_bytes()
            assert (len(data), sha256(data)) == (GUNZIPPED[name] if path.startswith("raw/") else served), name
            checked.append(name)
    assert len(checked) >= 16  # train, valid, test2016 and test2017, en and de, raw and tokenized
    assert holds_multi30k(multi30k)


def test_a_recorded_corpus_name_is_the_same_corpus_however_it_is_written(multi30k, tmp_path, monkeypatch):
    """`same_corpus`, which a resume and a release compare recorded corpora with: a folder of the official files is
    "multi30k" (runs recorded it so before it had a name), a path written another way is the same, others are not."""
    from vanilla_transformer.data.corpora import same_corpus

    monkeypatch.chdir(tmp_path)
    (tmp_path / "corpus").mkdir()
    assert same_corpus("multi30k", str(multi30k)) and same_corpus(str(multi30k), "multi30k")
    assert same_corpus("corpus", str(tmp_path / "corpus")) and same_corpus("wmt14", "wmt14")
    assert not same_corpus("multi30k", "corpus") and not same_corpus("corpus", "wmt14")

"""Multi30k Task 1 by name (Elliott et al. 2016, W16-3210): the en, de, fr and cs files of
https://github.com/multi30k/dataset at the pinned `COMMIT`, fetched once into a folder of the layout the package reads
(`{split}.{lang}` gunzipped, `tok/{split}.lc.norm.tok.{lang}` as served, split names mapped in `SPLITS`), each file
checked against its pinned size and sha256 when it arrives and before each use. Its terms are in the README."""

import gzip
import hashlib
import http.client
import json
import logging
import os
import urllib.error
import urllib.request
from collections.abc import Iterable
from pathlib import Path

from ..errors import DataError, Multi30kUnavailable
from .staging import atomic_file, fresh_staging_folder, remove_path
from .text import file_sha256

logger = logging.getLogger(__name__)

COMMIT = "a3d2e0d26b56f3846f66a952536ffed4e401d05a"
# a file is served as {OFFICIAL_URL}/{COMMIT}/data/task1/{path}; a mirror with the same layout can replace it
OFFICIAL_URL = "https://raw.githubusercontent.com/multi30k/dataset"
MULTI30K = "multi30k"  # its name as a corpus (`--corpus multi30k`)
MULTI30K_ENV = "VANILLA_TRANSFORMER_MULTI30K"  # a folder that already holds the files
URL_ENV = "VANILLA_TRANSFORMER_MULTI30K_URL"
CACHE_ENV = "VANILLA_TRANSFORMER_CACHE"
SPLITS = {
    "train": "train",
    "valid": "val",
    "test2016": "test_2016_flickr",
    "test2017": "test_2017_flickr",
    "test2018": "test_2018_flickr",
    "mscoco2017": "test_2017_mscoco",
}
DOWNLOAD_TIMEOUT_S = 60
# in the cache folder: {file: [size, mtime_ns, sha256]} of each file when its sha256 last matched (`_check_cache`)
RECORD = ".checked.json"

# Size in bytes and sha256 of each file under data/task1/ as served at COMMIT (`git show COMMIT:data/task1/PATH`,
# the bytes raw.githubusercontent.com serves).
SERVED: dict[str, tuple[int, str]] = {
    "raw/train.en.gz": (568929, "d79cfa999dd4c51d2cb42499b6796d5a882c3a8a961923c25a898c90f8bbd56f"),
    "raw/train.de.gz": (637044, "726e39b2fa9eb9ffb6dc763fb35a179f80fae06ffc5d28b6ace5faa883de28a6"),
    "raw/train.fr.gz": (604242, "622e75069e9f4c577425c4f277116ce66e63a2401c0a2312d90073cb12379a3c"),
    "raw/train.cs.gz": (593827, "a65adb8b32e3bc664f21ecba7a6e7f6950fd1f405e135f7c312faabdb6255077"),
    "raw/val.en.gz": (21650, "14f7d25ddd868909a9213e361768460edcacdd6ab9d1e77b92560dc10c10dc28"),
    "raw/val.de.gz": (24681, "f0cba2f995189cf5770f29a8a9a537a3ad3f51657ad873405082ff6863a5e75a"),
    "raw/val.fr.gz": (23001, "ca3106f1a72390591d25f6c45cb4cd39dec4cd3f123e099748a3ce5256c160e9"),
    "raw/val.cs.gz": (22096, "b63226e05c4bd5dd6a42897d74b86a1b9d2c31498252c572b1ea7f7996927fcc"),
    "raw/test_2016_flickr.en.gz": (21077, "611d361c6334bc7246101d48097c13cf5c4413c5befc793cc629934359d532d9"),
    "raw/test_2016_flickr.de.gz": (22890, "9204244e408ccb38d2a55cfcd344df15005fc42a07a6e55ca6c52b6ababb8cc8"),
    "raw/test_2016_flickr.fr.gz": (22310, "6d326e188d259fb1d04ac19eae3af956559b3a0b93d7635e56c90987c40c8b90"),
    "raw/test_2016_flickr.cs.gz": (22572, "200a4a74cc9560f051924abb9803be008d1908d77f747e9141aeb86dfd2797f1"),
    "raw/test_2017_flickr.en.gz": (19138, "76a444ee25172e72695cddb13ae4a3bda59430617be88e0bb46b60504f054074"),
    "raw/test_2017_flickr.de.gz": (21471, "a2c89666db00c495cd8513b9d708d5a3acc205d7de312ef2bf5fb7ebc1540aee"),
    "raw/test_2017_flickr.fr.gz": (20434, "3ba671ceb2299f3304ffafefea7a833d08632fbaf0ba18546f8a2ec2391af496"),
    "raw/test_2018_flickr.en.gz": (23514, "ef4f4844037d4c5dea75c9a8ed5fd78905967a26f67c255e230cc9780032654d"),
    "raw/test_2018_flickr.de.gz": (26461, "ddd0130c7d97482dc5197a02141dae8dd79f20f03586c480d675c09a32daf608"),
    "raw/test_2018_flickr.fr.gz": (25321, "fb2b83fcceb937a4f7e3e93c1c51c22aba92f1e342391e6b5ba392b16a920501"),
    "raw/test_2018_flickr.cs.gz": (25181, "7d0a9db904f94c554a8c58049a9f3a5357c27f46cc3d710d70cb0b4a2585b8c2"),
    "raw/test_2017_mscoco.en.gz": (8844, "aab300bfb4427697987e02cd0aacd44bfe8aa50456231b6474c08038bbed2b58"),
    "raw/test_2017_mscoco.de.gz": (10230, "799e4854c25d601cb6cb6be29eabe5667734c61ace2f495e03e429031a0bc338"),
    "raw/test_2017_mscoco.fr.gz": (9751, "754f3072ba9f124569ba5258b32730fc1d214bbf8e0c6dfb2b74401676220db0"),
    "tok/train.lc.norm.tok.en": (1837696, "08925f8e0572bcd5a006702fc5fe20e2d77c6917d4eebd576fc20de6693c2119"),
    "tok/train.lc.norm.tok.de": (2150008, "cb5a23529b65ec2061f1dc446192a9c37382b63cc75f81a0be59d34894b3a505"),
    "tok/train.lc.norm.tok.fr": (2235588, "8fa41bb718412bcb7c5dfa58603842810a01543eae86a51279f9886b901266e1"),
    "tok/train.lc.norm.tok.cs": (1791955, "7645fb91efa18f94c83d493f740a5d5a941e4b01efa6a124bf2d4af040e133e0"),
    "tok/val.lc.norm.tok.en": (64608, "46573ce391ae227f1c72f873392436a20ef18e0a6d518098cfbd70b77c8572ec"),
    "tok/val.lc.norm.tok.de": (77273, "97232bd273eceb7207f689527386a97e4be2616b18ada47576bdaf96c8ae1f00"),
    "tok/val.lc.norm.tok.fr": (78242, "b303e301aa21fe7822a846b2b3fb2d5a1121ec807cd5b1d006fb7b2b5507168a"),
    "tok/val.lc.norm.tok.cs": (61492, "b87ee4917f4a0f9ca6cca03e402026c9f4437dc1bd6a7dadfd2544ecfb6c5501"),
    "tok/test_2016_flickr.lc.norm.tok.en": (63307, "5b7f32627cf99eced828311b955dae9800bb52bc8b91cf8b6526829e605b29d2"),
    "tok/test_2016_flickr.lc.norm.tok.de": (71917, "c6a33d39d48f9f510de147651316cd9d918e09ad0219df734a2f16b6baccacc4"),
    "tok/test_2016_flickr.lc.norm.tok.fr": (76394, "1463bd5960f9bfe098ec3cd752d3df0c49c84dc646fb518964a29232658cd836"),
    "tok/test_2016_flickr.lc.norm.tok.cs": (63566, "748c8816de928732365176e5c5d2f9bbabcec9b8d4448fba2d230feb057898a7"),
    "tok/test_2017_flickr.lc.norm.tok.en": (56123, "c9d1dfd7a26add989382e534af235af9f0f658b2a30e7eb0efdaf142496ee54f"),
    "tok/test_2017_flickr.lc.norm.tok.de": (65228, "02067e4a9402786a4fcb8c1b6f4307e4a5073ced64800abead5273b54f5f31f6"),
    "tok/test_2017_flickr.lc.norm.tok.fr": (69537, "c0583117a47b31e8a6c6a97cfe8de153e462074668f4e994764fcc80b21d33b4"),
    "tok/test_2018_flickr.lc.norm.tok.en": (71617, "a66e25cbb8323d74a40873dcd222659f39e30ee7687a6ed5445833aed0673239"),
    "tok/test_2018_flickr.lc.norm.tok.de": (82274, "45ce6b121708adf538d3a8c71dc1acbcb1e0f2bca74ace8e58652f9ea5b96335"),
    "tok/test_2018_flickr.lc.norm.tok.fr": (90128, "22d44a4ba21e050f218399f2c4f9e1a36875f209820c1f1c9af5b76a2947a71c"),
    "tok/test_2018_flickr.lc.norm.tok.cs": (70515, "09a4987a524dea4852ccfef35329281b2cd577780691b732341ccecc4015aa4c"),
    "tok/test_2017_mscoco.lc.norm.tok.en": (25380, "fe69ae004d71c42ead0301e70c57de5b1b6b5fb7f52210d42b22801e98e656f3"),
    "tok/test_2017_mscoco.lc.norm.tok.de": (30464, "e2825990b8a4e5289d2cdba801d57c187810bab9b4f5d87a30c35800a0d871b6"),
    "tok/test_2017_mscoco.lc.norm.tok.fr": (31725, "0b6a4620f02b6b9acf7811fda23f90fed9c6baa0b96aa224db50a273078c84d1"),
}

# Size in bytes and sha256 of each raw file gunzipped, the `{split}.{lang}` file of a Multi30k folder (a `tok/` file is
# stored as served)
GUNZIPPED: dict[str, tuple[int, str]] = {
    "train.en": (1801238, "460a15fbd157e34a7a9957ee388c1ca247fe47af3ef25fb50442af6c274e0fc6"),
    "train.de": (2110398, "2c2b73fd2b548fbcde3a875e0a78d6ee94d498bfdee6bd3eae3945779e9ddf72"),
    "train.fr": (2111303, "5925a3c18f1587b6b54b87743106e6e8ab93618edb6f65d19eac0621f853a10d"),
    "train.cs": (1755283, "2be68b38c8d586ff4f54eb13cc6e1baaaa053695b3f070d3038303a47f2268da"),
    "valid.en": (63297, "1f2a23d992769b5b3d209b0a10dd0b77c08cceb1f20dfb97ed0aafa49d107227"),
    "valid.de": (75981, "660e09eb7e1da2f856ea13ee5ad3cf6d36b3d5b0b733c857e94c5747a3dfc660"),
    "valid.fr": (73924, "5304e444d842e962b2dda4d816b70b22a1765b15401642b7ca37a67477e708dc"),
    "valid.cs": (60213, "d53827e469b0a1ca8d57e9e26b2b64c4bc4b33f5479c7b03ae87ae5c882c3e33"),
    "test2016.en": (62076, "399a4382932c1aadd3ceb9bef1008d388a64c76d4ae4e9d4728c6f4301cac182"),
    "test2016.de": (70649, "4be6b5b3236b79c25475c6bb829800a7ce559e9ba7a1f6c2394fe4d40be46d16"),
    "test2016.fr": (72261, "cb3160d69b002bb638e66cc7612fcd56cb0af82eadc9c142dedc438afb885ef6"),
    "test2016.cs": (62364, "45adb85f688de8407fddcbe1b36dca15d12aab868149b337e2576f2d6d2ff8d8"),
    "test2017.en": (55242, "ce1450ddc5ab0834502579d77a170849952e15a2938b34cc503bdc25ebb4fb98"),
    "test2017.de": (64059, "c3078bc3b36808bf9d20eb2347ed6137016179ef59ec0d2b9b8ecc3fb2880081"),
    "test2017.fr": (65691, "6f3764e31dac41e9455e612958bcfd4e877c5e15cd66df2c2b2be6d9bd83e5b6"),
    "test2018.en": (70603, "4e585c2dd525911a6ea7730e9d0b516239af3f1b1ffae6a2130223cfb639f25e"),
    "test2018.de": (80893, "39fcc8b3331d76fb42d648d019c6898b0d5e58baac87bc2a0bb93f44ec8db207"),
    "test2018.fr": (84076, "234b4a887da0da4801a3e2c6f21336231ff7dd46daeb80cfa1b551c8bbb78239"),
    "test2018.cs": (69775, "1db59fe6980c9b3f9bade65122a985e71150214837d76f4768a5a8384c0b2dc7"),
    "mscoco2017.en": (24949, "43051fdfa86fd5395182e718a94ca67b1b227b9f7c79596ff0f6b813216981d2"),
    "mscoco2017.de": (29906, "58277df3c75f92f7145a11b910b553d1cf82c439249d4dc237c899609eafac22"),
    "mscoco2017.fr": (29982, "39cde3f43f32b0a6bf29ce4917a46329ff32e53070c2fac87506695a740ae0a0"),
}


def multi30k_dir(
    data_dir: str | Path | None = None,
    download: bool = True,
    languages: Iterable[str] = ("en", "de"),
    base_url: str | None = None,
) -> Path:
    """The folder of Multi30k files for `languages`: `data_dir` when given, else `$VANILLA_TRANSFORMER_MULTI30K`,
    else the download cache (`cache_dir()`), where a file missing or damaged is downloaded again from `base_url`
    (default `$VANILLA_TRANSFORMER_MULTI30K_URL`, else `OFFICIAL_URL`), or refused with `download=False` or offline.
    A given folder is the user's data, not held to the pins: it may rightly hold other versions (WMT16's val.de)."""
    languages = tuple(languages)
    given, origin = (data_dir, "data_dir") if data_dir is not None else (os.environ.get(MULTI30K_ENV), MULTI30K_ENV)
    if given:
        folder = Path(given).expanduser()
        if lacking := [lang for lang in languages if not any(folder.glob(f"*.{lang}"))]:
            problem = f"holds no {{split}}.{lacking[0]} files" if folder.is_dir() else "is not a folder"
            raise Multi30kUnavailable(
                f"{origin}={folder} {problem}; give a folder of {{split}}.{{lang}} files (e.g. train.{lacking[0]}), "
                f"or unset {origin} to use the download cache."
            )
        return folder

    if unknown := sorted(set(languages) - {_language(path) for path in SERVED}):
        raise DataError(f"Multi30k has no {', '.join(unknown)} files; its languages are en, de, fr and cs.")
    folder = cache_dir()
    missing, damaged = _check_cache(folder, [path for path in SERVED if _language(path) in languages])
    if not missing and not damaged:
        return folder
    base_url = (base_url or os.environ.get(URL_ENV) or OFFICIAL_URL).rstrip("/")
    offline = next((name for name in ("HF_DATASETS_OFFLINE", "HF_HUB_OFFLINE") if _is_set(name)), None)
    damages = "; ".join(f"{local_name(path)} has {problem}" for path, problem in damaged.items())
    if not download or (offline and base_url == OFFICIAL_URL):
        reason = "download=False" if not download else f"{offline} is set, so nothing is downloaded"
        if damaged:
            raise Multi30kUnavailable(
                f"Multi30k's cache {folder} holds damaged files ({reason}): {damages}"
                + (f"; {len(missing)} more missing" if missing else "")
                + f". Re-run where {base_url} can be reached, which downloads them again, or set {MULTI30K_ENV} to a "
                f"folder of good files."
            )
        raise Multi30kUnavailable(
            f"Multi30k is not on this machine: {len(missing)} files missing in {folder} ({reason}). "
            + _how_to(folder, base_url)
        )
    if damaged:
        logger.warning(f"downloading damaged Multi30k files in {folder} again: {damages}")
    _download([*missing, *damaged], folder, base_url)
    return folder


def cache_dir() -> Path:
    """Where `multi30k_dir` keeps its download: `multi30k-<commit>` in `$VANILLA_TRANSFORMER_CACHE`, by default
    `${XDG_CACHE_HOME:-~/.cache}/vanilla_transformer`."""
    default = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "vanilla_transformer"
    root = Path(os.environ.get(CACHE_ENV) or default).expanduser()
    if root.exists() and not root.is_dir():
        named = f"{CACHE_ENV}={root}" if os.environ.get(CACHE_ENV) else f"the cache folder {root}"
        raise DataError(f"{named} is a file, not a folder: point {CACHE_ENV} at a folder (it is created if missing).")
    return root / f"multi30k-{COMMIT[:8]}"


def local_name(path: str) -> str:
    """Where a file of `SERVED` lies in a Multi30k folder: `raw/val.en.gz` → `valid.en`."""
    ours = {official: split for split, official in SPLITS.items()}
    kind, name = path.split("/")
    official, rest = name.split(".", 1)
    return f"{ours[official]}.{rest.removesuffix('.gz')}" if kind == "raw" else f"tok/{ours[official]}.{rest}"


def holds_multi30k(folder: str | Path, names: Iterable[str] = ("train.en", "train.de", "valid.en", "valid.de")) -> bool:
    """Whether `folder` holds these Multi30k files byte for byte (`GUNZIPPED`): by default the ones training reads."""
    folder = Path(folder)
    return all(
        (folder / name).is_file()
        and (folder / name).stat().st_size == GUNZIPPED[name][0]
        and file_sha256(folder / name) == GUNZIPPED[name][1]
        for name in names
    )


def pinned(path: str) -> tuple[int, str]:
    """The size and sha256 of a file of `SERVED` as a Multi30k folder stores it (a raw file gunzipped)."""
    return GUNZIPPED[local_name(path)] if path.endswith(".gz") else SERVED[path]


def _language(path: str) -> str:
    return path.removesuffix(".gz").rsplit(".", 1)[1]


def _is_set(name: str) -> bool:
    # the values huggingface_hub and datasets take for "on"
    return os.environ.get(name, "").strip().upper() in {"1", "ON", "YES", "TRUE"}


def _how_to(folder: Path, base_url: str) -> str:
    renames = ", ".join(f"{official} as {ours}" for ours, official in SPLITS.items() if ours != official)
    return (
        f"Run `vanilla-transformer download-multi30k` where {base_url} can be reached, or copy the files of "
        f"{base_url}/{COMMIT}/data/task1/ into {folder} by hand (raw/{{split}}.{{lang}}.gz gunzipped as "
        f"{{split}}.{{lang}}, tok/ as is, splits renamed: {renames}), or set {MULTI30K_ENV} to a folder of them."
    )


def _check_cache(folder: Path, paths: list[str]) -> tuple[list[str], dict[str, str]]:
    """Which of `paths` the cache `folder` lacks, and which it holds damaged (not their `pinned` size and sha256),
    with what is wrong; a file is hashed only when its size or mtime changed since it last passed (`RECORD`)."""
    record = _read_record(folder)
    missing, damaged, passed = [], {}, {}
    for path in paths:
        name, (size, sha256) = local_name(path), pinned(path)
        try:
            stat = (folder / name).stat()
        except FileNotFoundError:
            missing.append(path)
            continue
        seen = [stat.st_size, stat.st_mtime_ns, sha256]
        if stat.st_size != size:
            damaged[path] = f"{stat.st_size} bytes, expected {size}"
        elif record.get(name) == seen or (digest := file_sha256(folder / name)) == sha256:
            passed[name] = seen
        else:
            damaged[path] = f"sha256 {digest}, expected {sha256}"
    broken = {local_name(path) for path in [*missing, *damaged]}
    updated = {name: seen for name, seen in record.items() if name not in broken} | passed
    if updated != record:
        _write_record(folder, updated)
    return missing, damaged


def _read_record(folder: Path) -> dict[str, list]:
    try:
        files = json.loads((folder / RECORD).read_text())["files"]
    except (OSError, ValueError, KeyError, TypeError):
        return {}
    return files if isinstance(files, dict) else {}


def _write_record(folder: Path, files: dict[str, list]) -> None:
    try:  # a cache it cannot write to (read-only, shared) only costs the hashing again next time
        with atomic_file(folder / RECORD) as staging:
            staging.write_text(json.dumps({"commit": COMMIT, "files": files}, indent=1, sort_keys=True))
    except OSError as error:
        logger.debug(f"could not record the checked Multi30k files in {folder / RECORD}: {error}")


def _download(paths: list[str], folder: Path, base_url: str) -> None:
    """Fetch and check `paths` beside `folder`, then move them all in: a failed download leaves nothing behind."""
    folder.parent.mkdir(parents=True, exist_ok=True)
    logger.info(f"downloading {len(paths)} Multi30k files from {base_url} into {folder}")
    staging = fresh_staging_folder(folder)
    try:
        for path in paths:
            data = _fetch(path, base_url, folder)
            stored = gzip.decompress(data) if path.endswith(".gz") else data
            # _fetch checked the served bytes; this checks the gunzipped ones too, so that the record vouches only
            # for what was hashed
            if (len(stored), hashlib.sha256(stored).hexdigest()) != pinned(path):
                raise Multi30kUnavailable(
                    f"Multi30k's {path} gunzips to bytes other than GUNZIPPED pins for {local_name(path)}; nothing "
                    f"was stored: report this bug."
                )
            target = staging / local_name(path)
            target.parent.mkdir(exist_ok=True)
            target.write_bytes(stored)
        for path in paths:  # each rename is atomic: a reader sees a file whole or not at all
            (folder / local_name(path)).parent.mkdir(parents=True, exist_ok=True)
            os.replace(staging / local_name(path), folder / local_name(path))
    finally:
        remove_path(staging)
    _check_cache(folder, paths)  # hashes them once more, which records them as checked


def _fetch(path: str, base_url: str, folder: Path) -> bytes:
    url, (size, sha256) = f"{base_url}/{COMMIT}/data/task1/{path}", SERVED[path]
    try:
        with urllib.request.urlopen(url, timeout=DOWNLOAD_TIMEOUT_S) as response:
            data = response.read()
    except urllib.error.HTTPError as error:
        got = f"HTTP {error.code} {error.reason}"
    except (OSError, http.client.HTTPException) as error:  # no connection, a timeout, a connection cut short
        got = str(getattr(error, "reason", error))
    else:
        digest = hashlib.sha256(data).hexdigest()
        if len(data) == size and digest == sha256:
            return data
        got = f"{len(data)} bytes with sha256 {digest}"
    raise Multi30kUnavailable(
        f"downloading Multi30k's {path} from {url} failed: expected {size} bytes with sha256 {sha256}, got {got}; "
        f"nothing was stored. " + _how_to(folder, base_url)
    )

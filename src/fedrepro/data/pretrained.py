"""Pre-trained checkpoint folders: DPZV's pre-trained BERT for Amazon Review Polarity (DPZV §7).

A tokenizer (`datasets.<name>.tokenizer_dir` with `tokenizer: bert`) and a client text encoder
(`model.options.pretrained_dir` of `vfl_text_encoder`) read a folder laid out by Hugging Face
`save_pretrained`. The rule `stage_pretrained` (workflow/rules/data.smk) makes each configured
folder ready before any job reads it and writes `<folder>/.staged.json`, on which those jobs
depend. The top-level key `pretrained_source` says what a folder must hold:

* `pinned`: google-bert/bert-base-uncased at revision `PINNED.revision`, the files in
  `PINNED.files`, each checked against its published size and sha256. A file already in the folder
  (a pre-staged copy, e.g. from a Hugging Face cache snapshot of that revision on an offline cluster)
  is checked; a missing one is downloaded from the Hub at that revision (`sources.fetch_file`:
  temporary file, checksum, atomic rename).
* `custom`: a BERT checkpoint of your own, saved with `save_pretrained` (a fine-tuned BERT, or
  the tiny random one the tests build). Nothing is downloaded and no published checksum applies:
  the files are checked against each other (`check_form`) and their sizes and sha256 are recorded
  in the marker.

`checkpoint_facts` gives what the model/data fit check (fedrepro.experiments.fit) needs before any
folder exists: for `pinned` from the copies of the revision's config.json and tokenizer_config.json
shipped in fedrepro/data/files/ (byte-identical: same sha256 as the Hub files), for `custom` from
the folder itself. Pure standard library: importing this module is cheap.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from fedrepro.data import sources

SOURCES = ("pinned", "custom")
MARKER = ".staged.json"
SPECIAL_TOKENS = {"pad_id": "[PAD]", "unk_id": "[UNK]", "cls_id": "[CLS]", "sep_id": "[SEP]"}
WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


@dataclass(frozen=True)
class PinnedFile:
    name: str
    size: int
    sha256: str


@dataclass(frozen=True)
class Pinned:
    repo: str
    revision: str
    files: tuple[PinnedFile, ...]
    vocab: dict  # special token ids and size of the revision's vocab.txt
    homepage: str
    licence: str

    def url(self, name: str) -> str:
        return f"https://huggingface.co/{self.repo}/resolve/{self.revision}/{name}"


# google-bert/bert-base-uncased (Devlin et al. 2019), the revision the Hub's main branch has served
# since 2024. Sizes and sha256: model.safetensors is Git LFS, so the Hub publishes its sha256 (LFS
# oid); the four small files are plain git blobs (the Hub publishes their git blob sha1 only: config
# 45a2321a, vocab fb140275, tokenizer.json 949a6f01, tokenizer_config e5c73d8a) and their sha256 are
# the ones recorded by two independent public download manifests of this revision, which agree; the
# copies of config.json and tokenizer_config.json in fedrepro/data/files/ reproduce theirs.
PINNED = Pinned(
    repo="google-bert/bert-base-uncased",
    revision="86b5e0934494bd15c9632b12f734a8a67f723594",
    files=(
        PinnedFile("config.json", 570, "7160e1553ad2ca51d8c1cb066be533db31826e12d173824c1bb0cb1a4f187d20"),
        PinnedFile("tokenizer_config.json", 48, "a025160ef0431f1a392f6f050c1310f4c5d9fb6f275932dbccba73c4d214bf10"),
        PinnedFile("vocab.txt", 231508, "07eced375cec144d27c900241f3e339478dec958f92fddbc551f295c992038a3"),
        PinnedFile("tokenizer.json", 466062, "ce64fce797c24f68df90b40a3f74f579b336a493db14bd583fd520ea0d8c9a98"),
        PinnedFile("model.safetensors", 440449768, "68d45e234eb4a928074dfd868cead0219ab85354cc53d20e772753c6bb9169d3"),
    ),
    # vocab.txt: [PAD] on line 0, [unused0-98] on 1-99, then [UNK] [CLS] [SEP] [MASK]; 30,522 lines
    vocab={"size": 30522, "pad_id": 0, "unk_id": 100, "cls_id": 101, "sep_id": 102},
    homepage="https://huggingface.co/google-bert/bert-base-uncased",
    licence="Apache-2.0",
)
SHIPPED = {
    "config.json": "bert-base-uncased.config.json",
    "tokenizer_config.json": "bert-base-uncased.tokenizer_config.json",
}


class StagingError(RuntimeError):
    """A checkpoint folder that cannot be used: missing, incomplete, or files that do not fit together."""


def check_source(source: str) -> None:
    if source not in SOURCES:
        raise ValueError(f"config key 'pretrained_source': {source!r} is not one of {', '.join(SOURCES)}")


def marker(folder: str | os.PathLike) -> str:
    """The file `stage_pretrained` writes into a staged folder (what the jobs reading it depend on)."""
    return str(Path(folder) / MARKER)


# ------------------------------------------------------------------------ which folders a config reads


def dataset_folders(config: dict, dataset: str) -> list[str]:
    """The tokenizer folder the preparation of `dataset` reads ([] unless `tokenizer: bert`)."""
    from fedrepro.data.prepared import resolve_options

    options = resolve_options(dataset, config.get("datasets", {}).get(dataset, {}))
    if options.get("tokenizer") == "bert" and options.get("tokenizer_dir"):
        return [str(options["tokenizer_dir"])]
    return []


def model_folders(tree) -> list[str]:
    """Every non-empty `pretrained_dir` in a (nested) config section or job spec."""
    found = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key == "pretrained_dir" and isinstance(value, str) and value:
                found.append(value)
            else:
                found += model_folders(value)
    elif isinstance(tree, list):
        for value in tree:
            found += model_folders(value)
    return list(dict.fromkeys(found))


def staged_folders(config: dict, papers: list[str]) -> list[str]:
    """Every checkpoint folder the enabled `papers` and the data sets read (the rule's wildcard values)."""
    folders = [f for dataset in config.get("datasets", {}) for f in dataset_folders(config, dataset)]
    folders += [f for paper in papers for f in model_folders(config.get(paper, {}))]
    return list(dict.fromkeys(folders))


def markers(tree) -> list[str]:
    """The staged markers a job spec's model folders need ([] for a job without a pre-trained model)."""
    return [marker(folder) for folder in model_folders(tree)]


def dataset_markers(config: dict, dataset: str) -> list[str]:
    return [marker(folder) for folder in dataset_folders(config, dataset)]


# ------------------------------------------------------------------------------------ staging


def stage(folder: str | os.PathLike, source: str, allow_download: bool = True, timeout: float = 60.0) -> dict:
    """Make `folder` a usable checkpoint (see the module docstring); returns the marker's record."""
    check_source(source)
    folder = Path(folder)
    if source == "pinned":
        fetched = []
        for pinned in PINNED.files:
            raw = sources.RawFile(pinned.name, (PINNED.url(pinned.name),), sha256=pinned.sha256)
            try:
                fetched.append(sources.fetch_file(raw, folder, allow_download, timeout))
            except sources.ChecksumError as err:
                raise StagingError(
                    f"pretrained_source: pinned: {err} If {folder}/ holds a checkpoint of your own, set "
                    f"pretrained_source: custom."
                ) from err
            except sources.DataUnavailableError as err:
                raise StagingError(
                    f"pretrained_source: pinned: {PINNED.repo} at revision {PINNED.revision} is not in {folder}/ "
                    f"and could not be downloaded. Copy its files {[f.name for f in PINNED.files]} there (e.g. from "
                    f"a Hugging Face cache snapshot of that revision), or set pretrained_source: custom for a "
                    f"checkpoint of your own.\n{err}"
                ) from err
        check_form(folder)
        files = {f.filename: {"size": f.path.stat().st_size, **f.checksums, "origin": f.origin} for f in fetched}
        return {"source": source, "repo": PINNED.repo, "revision": PINNED.revision, "files": files}
    if not folder.is_dir():
        raise StagingError(
            f"pretrained_source: custom: checkpoint folder {folder}/ does not exist; save a BERT checkpoint there "
            f"(model.save_pretrained and tokenizer.save_pretrained), or set pretrained_source: pinned to download "
            f"{PINNED.repo}"
        )
    check_form(folder)
    files = {
        p.name: {"size": p.stat().st_size, "sha256": sources.file_digest(p, "sha256"), "origin": "pre-staged"}
        for p in sorted(folder.iterdir())
        if p.is_file() and not p.name.startswith(".staged")  # the marker and the rule's log
    }
    return {"source": source, "files": files}


def stage_job(job) -> None:
    """Entry of the rule `stage_pretrained`: stage the folder, then write its marker."""
    record = stage(job.spec["folder"], job.spec["source"])
    job.out("marker").write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


# ---------------------------------------------------------------------------------- the form


def read_vocab(path: Path) -> dict:
    """Size and special token ids of a WordPiece vocab.txt (one token a line, id = line number)."""
    tokens = path.read_text(encoding="utf-8").splitlines()
    index = {token: i for i, token in reversed(list(enumerate(tokens)))}
    missing = [token for token in SPECIAL_TOKENS.values() if token not in index]
    if missing:
        raise StagingError(f"{path}: WordPiece vocabulary without the special tokens {missing}")
    return {"size": len(tokens), **{key: index[token] for key, token in SPECIAL_TOKENS.items()}}


def _read_json(path: Path) -> dict:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError as err:
        raise StagingError(f"{path} is missing") from err
    except ValueError as err:
        raise StagingError(f"{path} is not valid JSON: {err}") from err


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Tensor name -> shape from a safetensors header (8-byte little-endian length, then JSON)."""
    with open(path, "rb") as f:
        head = f.read(8)
        if len(head) < 8:
            raise StagingError(f"{path} is not a safetensors file (shorter than its header)")
        (length,) = struct.unpack("<Q", head)
        if length > 100_000_000:
            raise StagingError(f"{path} is not a safetensors file (header length {length})")
        try:
            header = json.loads(f.read(length))
        except ValueError as err:
            raise StagingError(f"{path} is not a safetensors file: {err}") from err
    return {name: entry["shape"] for name, entry in header.items() if name != "__metadata__"}


def check_form(folder: Path) -> None:
    """The checkpoint's files fit together: a BERT config, a WordPiece vocabulary that the embedding
    table covers, and weights whose embedding tables have the config's shapes."""
    config = _read_json(folder / "config.json")
    if config.get("model_type") != "bert":
        raise StagingError(f"{folder}/config.json: model_type {config.get('model_type')!r}, expected 'bert'")
    vocab = read_vocab(folder / "vocab.txt") if (folder / "vocab.txt").exists() else None
    if vocab is None:
        raise StagingError(f"{folder}/vocab.txt is missing (the WordPiece vocabulary; tokenizer.save_pretrained)")
    if vocab["size"] > config["vocab_size"]:
        raise StagingError(
            f"{folder}: vocab.txt has {vocab['size']} tokens but config.json's vocab_size is {config['vocab_size']}"
        )
    weights = [name for name in WEIGHT_FILES if (folder / name).exists()]
    if not weights:
        raise StagingError(f"{folder}/ holds no weights (one of {', '.join(WEIGHT_FILES)})")
    if weights[0] == "model.safetensors":
        shapes = safetensors_shapes(folder / "model.safetensors")
        want = {
            "embeddings.word_embeddings.weight": [config["vocab_size"], config["hidden_size"]],
            "embeddings.position_embeddings.weight": [config["max_position_embeddings"], config["hidden_size"]],
        }
        for suffix, shape in want.items():
            found = [s for name, s in shapes.items() if name == suffix or name.endswith("." + suffix)]
            if found != [shape]:
                raise StagingError(
                    f"{folder}/model.safetensors: {suffix} has shape {found[0] if found else 'none'}, "
                    f"config.json says {shape}"
                )


# ------------------------------------------------------------------------- facts for the fit check


def checkpoint_facts(folder: str, source: str) -> dict:
    """{"config": config.json, "vocab": read_vocab, "model_max_length": tokenizer limit or None}.

    `pinned`: the pinned revision's (no folder needed: the staging rule downloads it later);
    `custom`: read from the folder, which must exist already (StagingError names what is missing).
    """
    check_source(source)
    if source == "pinned":
        config = _read_json(sources.SHIPPED_DIR / SHIPPED["config.json"])
        tokenizer = _read_json(sources.SHIPPED_DIR / SHIPPED["tokenizer_config.json"])
        return {"config": config, "vocab": dict(PINNED.vocab), "model_max_length": tokenizer["model_max_length"]}
    path = Path(folder)
    if not path.is_dir():
        raise StagingError(f"folder {folder}/ does not exist (pretrained_source: custom reads it before any job)")
    config = _read_json(path / "config.json")
    if not (path / "vocab.txt").exists():
        raise StagingError(f"{folder}/vocab.txt is missing (the WordPiece vocabulary; tokenizer.save_pretrained)")
    tokenizer = _read_json(path / "tokenizer_config.json") if (path / "tokenizer_config.json").exists() else {}
    limit = tokenizer.get("model_max_length")
    limit = int(limit) if isinstance(limit, int | float) and limit < 1e9 else None  # 1e30: "no limit"
    return {"config": config, "vocab": read_vocab(path / "vocab.txt"), "model_max_length": limit}


def same_vocabulary(folder_a: str, folder_b: str, source: str) -> bool:
    """True when two checkpoint folders hold the same vocab.txt (always, for pinned: both are the revision's)."""
    if source == "pinned" or Path(folder_a).resolve() == Path(folder_b).resolve():
        return True
    a, b = Path(folder_a, "vocab.txt"), Path(folder_b, "vocab.txt")
    return a.exists() and b.exists() and sources.file_digest(a) == sources.file_digest(b)

"""Model/data fit of every paper, checked by the planner before any job runs.

A model that does not fit its data (input shape, channels, classes, a vertical split that
cannot cut the sample, a text encoder whose vocabulary or length is too small) otherwise
fails inside a job, late and with a message such as `mat1 and mat2 shapes cannot be
multiplied`. Here every model a config builds is built with the arguments its job passes,
on PyTorch's meta device (no memory, no arithmetic), and run on one sample of the shape
the data set's preparation produces (`fedrepro.data.prepare.sample_shape`: the catalog's, or
the one the data set's own options give). Each error names the config key and says what the
data has.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import json
import os
from pathlib import Path

from fedrepro.data.catalog import DATASETS
from fedrepro.data.sizes import dataset_options, num_classes


def prepared_group_count(config: dict, dataset: str) -> int | None:
    """The natural groups of `dataset` as its prepared meta.json counts them (`groups.count`), if it is
    prepared under `config["results"]` with the options the config gives it now; else None."""
    path = Path(config.get("results", "results")) / "data" / dataset / "meta.json"
    try:
        meta = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if meta.get("options") != json.loads(json.dumps(dataset_options(config, dataset), default=str)):
        return None  # prepared with other options: the prepare job runs again first
    return meta.get("groups", {}).get("count")


class Data:
    """What a model must fit: one sample's shape, the classes, the token vocabulary (text)."""

    def __init__(self, config: dict, dataset: str):
        from fedrepro.data.prepare import sample_shape

        options = dataset_options(config, dataset)
        self.name, self.kind = dataset, DATASETS[dataset].kind
        self.shape, self.classes = sample_shape(dataset, options), num_classes(dataset, options)
        self.vocab = options.get("vocab_size")
        self.options = options
        self.memory_mb = config.get("resources", {}).get("train", {}).get("mem_mb")  # a training job's memory

    def describe(self) -> str:
        return f"data set {self.name!r} (one sample {self.shape}, {self.classes} classes)"


# Largest model whose shapes are checked on the CPU (`_run_model`); a larger one runs on the meta device.
CPU_CHECK_BYTES = 256 * 2**20


def _run_model(model: str, kwargs: dict, shape: tuple, tokens: bool) -> dict:
    """Build registered `model(**kwargs)` on the meta device and run it on one sample of `shape`:
    {"out": output shape, "feature_dim": the model's feature_dim or None}, or {"error": why not}.
    A model of at most CPU_CHECK_BYTES of fp32 weights runs on the CPU with its weights set to zero
    (allocated, not initialised): the same shapes, without the meta device's Python kernels, whose first
    use imports about 900 modules of torch (1-3 CPU-s at every Snakemake start without a fit cache)."""
    import torch

    from fedrepro.models import build_model

    threads = torch.get_num_threads()
    try:
        with torch.device("meta"):
            net = build_model(model, **kwargs).eval()
        device = "cpu" if _count(net) * 4 <= CPU_CHECK_BYTES else "meta"
        if device == "cpu":
            _zeros_on_the_cpu(net)
            torch.set_num_threads(1)  # one sample: more threads only spin (0.6 CPU-s for a ResNet-18 on 2 busy cores)
        with torch.device(device), torch.no_grad():
            out = net(torch.zeros((1, *shape), dtype=torch.long if tokens else torch.float32))
    except Exception as error:  # noqa: BLE001 (any failure to build or run it is the message)
        text = str(error).strip().splitlines()
        return {"error": f"{type(error).__name__}: {text[0] if text else ''}"}
    finally:
        torch.set_num_threads(threads)
    width = getattr(net, "feature_dim", None)
    return {"out": list(out.shape), "feature_dim": int(width) if width is not None else None, "params": _count(net)}


def _zeros_on_the_cpu(net) -> None:
    """Replace every parameter and buffer of the meta-device `net` by zeros of its shape on the CPU (read
    off the meta tensors; `Module.to_empty` would run a meta kernel per tensor)."""
    import torch

    for module in net.modules():
        for name, param in module._parameters.items():
            if param is not None:
                module._parameters[name] = torch.nn.Parameter(torch.zeros(param.shape, dtype=param.dtype), False)
        for name, buffer in module._buffers.items():
            if buffer is not None:
                module._buffers[name] = torch.zeros(buffer.shape, dtype=buffer.dtype)


def _count(net) -> int:
    return sum(p.numel() for p in net.parameters())


def _build_model(model: str, kwargs: dict, shape: tuple, tokens: bool) -> dict:
    """Like `_run_model` without the forward pass: build `model(**kwargs)` on the meta device and read
    its output width off the final layer. For a pre-trained BERT: transformers' attention-mask code
    reads tensor values (`padding_mask.all()`), which meta tensors do not have; what a forward pass
    would check (positions, vocabulary, padding) `pretrained_errors` checks from the checkpoint's files."""
    import torch

    from fedrepro.models import build_model

    try:
        with torch.device("meta"):
            net = build_model(model, **kwargs)
    except Exception as error:  # noqa: BLE001 (any failure to build it is the message)
        text = str(error).strip().splitlines()
        return {"error": f"{type(error).__name__}: {text[0] if text else ''}"}
    last = [m for m in net.modules() if isinstance(m, torch.nn.Linear)][-1]
    return {"out": [1, int(last.out_features)], "feature_dim": None, "params": _count(net)}


class Results:
    """Results of `_run_model`, optionally kept in a JSON file between Snakemake parses (importing
    torch costs seconds). A key holds the model's arguments, the sample shape and the hash of the
    model code (fedrepro.models) and torch's version, so an edit there, another torch or another option
    computes afresh; saving keeps the entries of the current code only."""

    def __init__(self, path: str | Path | None = None):
        self.path = Path(path) if path else None
        try:
            self.saved = json.loads(self.path.read_text()) if self.path else {}
        except (FileNotFoundError, ValueError):  # none yet, or a broken one: compute afresh
            self.saved = {}
        self.changed = False

    @functools.cached_property
    def code(self) -> str:
        from fedrepro.codedeps import code_hash

        models = sorted(p.stem for p in (Path(__file__).parents[1] / "models").glob("*.py"))
        names = [f"fedrepro.models.{m}" if m != "__init__" else "fedrepro.models" for m in models]
        torch = importlib.metadata.version("torch")
        return hashlib.sha256((torch + "".join(code_hash(n) for n in names)).encode()).hexdigest()[:16]

    def run(self, model: str, kwargs: dict, shape: tuple, tokens: bool, forward: bool = True) -> dict:
        key = json.dumps([self.code, model, kwargs, list(shape), tokens, forward, "params"], sort_keys=True)
        if key not in self.saved:
            self.saved[key] = (_run_model if forward else _build_model)(model, kwargs, tuple(shape), tokens)
            self.changed = True
        return self.saved[key]

    def save(self) -> None:
        """Write the file (a cache: where it cannot be written, the next parse computes afresh)."""
        if self.path and self.changed:
            from fedrepro.atomic import atomic_write_text

            current = {key: value for key, value in self.saved.items() if json.loads(key)[0] == self.code}
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
                atomic_write_text(self.path, json.dumps(current, sort_keys=True))
            except OSError:
                pass


def shared_cache() -> Path:
    """The Snakefile's `Results` file: beside this installation's byte code (fedrepro.bytecode), so that
    every working folder and test of the installation reads the model runs one parse made."""
    from fedrepro.bytecode import PREFIX_ENV, default_folder

    return Path(os.environ.get(PREFIX_ENV) or default_folder()) / "fedrepro" / "fit.json"


RESULTS = Results()


def dataset_size_errors(key: str, dataset: str, clients: int) -> list[str]:
    """'more clients than samples' for one partition setting."""
    n_train = DATASETS[dataset].n_train
    if clients > n_train:
        return [f"config key '{key}': {clients} clients but data set {dataset!r} has only {n_train} training samples"]
    return []


def model_fit_errors(key: str, options: dict, dataset: str, dataset_options: dict | None = None) -> list[str]:
    """A model's `in_features` / `in_channels` / `num_classes` (config key `key`) against the
    data set's shape and classes (the catalog, or the data set's own options where they set
    them), so that a model that does not fit its data fails here and not inside a job."""
    import numpy as np

    from fedrepro.data.prepare import resolve_options, sample_shape

    info, dataset_options = DATASETS[dataset], dataset_options or {}
    try:
        shape = sample_shape(dataset, resolve_options(dataset, dataset_options))
    except ValueError:
        return []  # an unknown data set option: its own check names it
    classes = dataset_options.get("num_classes", info.num_classes)
    errors = []
    if options.get("num_classes", 0) and options["num_classes"] != classes:
        errors.append(
            f"config key '{key}.num_classes': {options['num_classes']}, but data set {dataset!r} has {classes} classes"
        )
    if "in_features" in options and info.kind in ("image", "tabular"):
        features = int(np.prod(shape))
        if options["in_features"] != features:
            errors.append(
                f"config key '{key}.in_features': {options['in_features']}, but a sample of "
                f"{dataset!r} has {features} features (shape {tuple(shape)})"
            )
    if "in_channels" in options and info.kind == "image" and options["in_channels"] != shape[0]:
        errors.append(
            f"config key '{key}.in_channels': {options['in_channels']}, but {dataset!r} "
            f"images have {shape[0]} channel(s)"
        )
    return errors


def forward_errors(
    key: str,
    model: str,
    kwargs: dict,
    shape: tuple,
    want: int | None,
    data: Data,
    what: str,
    tokens: bool = False,
    forward: bool = True,
) -> list[str]:
    """[] when `model(**kwargs)` maps one sample of `shape` to `want` outputs (None: the
    model's own feature_dim), else why not. `forward=False`: built only (`_build_model`)."""
    where = f"config key '{key}': model {model!r} does not fit {data.describe()}"
    result = RESULTS.run(model, kwargs, shape, tokens, forward)
    if "error" in result:
        return [f"{where}: {result['error']}"]
    if data.memory_mb and result["params"] * 4 > data.memory_mb * 2**20:
        return [
            f"config key '{key}': model {model!r} has {result['params']:,} parameters, whose fp32 weights alone "
            f"({result['params'] * 4 / 2**30:.1f} GiB) exceed a training job's memory, resources.train.mem_mb = "
            f"{data.memory_mb}; allowed: at most {data.memory_mb * 2**20 // 4:,} parameters (a smaller model, "
            "or more mem_mb)"
        ]
    want = result["feature_dim"] if want is None else want
    if result["out"] != [1, want]:
        return [f"{where}: it gives {tuple(result['out'][1:])} outputs per sample, the job needs {want} ({what})"]
    return []


def extractor_errors(key: str, model: str, kwargs: dict, data: Data) -> list[str]:
    """A feature extractor (num_classes=0) gives `feature_dim` outputs on one sample."""
    return forward_errors(key, model, {**kwargs, "num_classes": 0}, data.shape, None, data, "its feature_dim")


# ------------------------------------------------------------------------------ papers


def fedavg_errors(config: dict) -> list[str]:
    section = config["fedavg"]
    data = Data(config, section["dataset"])
    errors = []
    for method, settings in section["methods"].items():
        errors += forward_errors(
            f"fedavg.methods.{method}.model_options",
            settings["model"],
            settings.get("model_options", {}),
            data.shape,
            data.classes,
            data,
            "one logit per class",
        )
    return errors


def fedsc_errors(config: dict) -> list[str]:
    section = config["fedsc"]
    errors = []
    standin = list(section["standin"]["datasets"]) if section.get("standin") else []  # target fedsc_standin
    for dataset in [*section["run_datasets"], *standin]:
        key, ds, data = f"fedsc.datasets.{dataset}", section["datasets"][dataset], Data(config, dataset)
        if data.kind != "image":
            errors.append(f"config key '{key}': FedSC trains image encoders; {data.describe()} is {data.kind}")
            continue
        encoder = ds["encoder"]
        errors += extractor_errors(
            f"{key}.encoder", encoder["name"], {"in_channels": data.shape[0], **encoder.get("kwargs", {})}, data
        )
        if data.classes % ds["clients"]:
            errors.append(
                f"config key '{key}.clients': {ds['clients']} clients cannot hold equal blocks of "
                f"consecutive classes of {data.describe()}; clients must divide {data.classes}"
            )
    return errors


def _client_shapes(key: str, data: Data, partition: dict) -> tuple[list[tuple], list[str]]:
    """Each DPZV client's input shape under the vertical split (several views become channels)."""
    from fedrepro.data.partition import vertical_partition

    try:
        part = vertical_partition(data.shape, partition["split"], partition["clients"])
    except ValueError as error:
        return [], [f"config key '{key}': {error} ({data.describe()})"]
    return [(s[0] * s[1], *s[2:]) if len(s) == 4 else tuple(s) for s in part.feature_shapes], []


def vfl_client_errors(key: str, model: dict, data: Data, shapes: list[tuple], source: str = "pinned") -> list[str]:
    """DPZV clients: each maps its slice to `embed_dim` outputs (fedrepro.algorithms.dpzv.base).
    `source`: the top-level `pretrained_source` (a pre-trained encoder's checkpoint)."""
    tokens = data.kind == "text"
    errors = []
    for shape in dict.fromkeys(shapes):
        kwargs = {**model.get("options", {}), "embed_dim": model["embed_dim"]}
        if kwargs.get("pretrained_dir"):
            errors += pretrained_errors(f"{key}.options", kwargs, data, shape, source)
            continue
        if tokens:
            errors += _token_errors(f"{key}.options", kwargs, data, shape)
        else:
            kwargs.setdefault("in_channels", shape[0])
        errors += forward_errors(
            key,
            model["client"],
            kwargs,
            shape,
            model["embed_dim"],
            data,
            f"embed_dim of a client holding {shape}",
            tokens,
        )
    return errors


def pretrained_errors(key: str, kwargs: dict, data: Data, shape: tuple, source: str) -> list[str]:
    """A pre-trained BERT client (`key`.pretrained_dir) against the data it reads: the data's token ids
    come from the checkpoint's own WordPiece vocabulary (`tokenizer: bert`, the same vocab.txt), the
    padding id the encoder masks is the vocabulary's [PAD] (and a prepended [CLS] its [CLS]), a
    client's tokens fit the checkpoint's position table and the tokenizer's length limit, and the
    embedding table covers the vocabulary. The checkpoint's facts come from
    fedrepro.data.pretrained.checkpoint_facts (the pinned revision's, or the staged folder's)."""
    from fedrepro.data.pretrained import StagingError, checkpoint_facts, same_vocabulary

    folder = kwargs["pretrained_dir"]
    where = f"config key '{key}.pretrained_dir' ({folder})"
    try:
        facts = checkpoint_facts(folder, source)
    except StagingError as error:
        return [f"{where}: {error}"]
    config, vocab, data_key = facts["config"], facts["vocab"], f"datasets.{data.name}"
    errors = []
    tokenizer = data.options.get("tokenizer")
    if tokenizer != "bert":
        errors.append(
            f"config key '{data_key}.tokenizer': {tokenizer!r}, but {where} is a pre-trained BERT, which reads "
            f"the ids of its own WordPiece vocabulary: set tokenizer: bert and tokenizer_dir: {folder}"
        )
    elif not same_vocabulary(data.options.get("tokenizer_dir") or "", folder, source):
        errors.append(
            f"config key '{data_key}.tokenizer_dir': {data.options.get('tokenizer_dir')!r} does not hold the "
            f"vocab.txt of {where}; the encoder would read the ids of another vocabulary"
        )
    pad, cls = kwargs.get("pad_id", 0), kwargs.get("cls_token_id")
    if pad != vocab["pad_id"]:
        errors.append(f"config key '{key}.pad_id': {pad}, but the checkpoint's [PAD] is id {vocab['pad_id']}")
    if cls is not None and cls != vocab["cls_id"]:
        errors.append(f"config key '{key}.cls_token_id': {cls}, but the checkpoint's [CLS] is id {vocab['cls_id']}")
    length = shape[0] + (cls is not None)
    for limit, what in (
        (config["max_position_embeddings"], "max_position_embeddings (config.json)"),
        (facts["model_max_length"], "tokenizer model_max_length (tokenizer_config.json)"),
    ):
        if limit is not None and length > limit:
            errors.append(
                f"config key '{data_key}.length': a client holds {length} tokens (length / chunks"
                f"{' + [CLS]' if cls is not None else ''}), more than the checkpoint's {what} {limit} ({where})"
            )
    if vocab["size"] > config["vocab_size"]:
        errors.append(
            f"{where}: vocab.txt has {vocab['size']} tokens, config.json's vocab_size is {config['vocab_size']}"
        )
    built = {k: v for k, v in kwargs.items() if k != "pretrained_dir"}
    return errors + forward_errors(
        key,
        "vfl_text_encoder",
        {**built, "bert_config": config},
        shape,
        kwargs["embed_dim"],
        data,
        "embed_dim",
        tokens=True,
        forward=False,
    )


def _token_errors(key: str, kwargs: dict, data: Data, shape: tuple) -> list[str]:
    errors = []
    if data.vocab is not None and kwargs.get("vocab_size", data.vocab) < data.vocab:
        errors.append(
            f"config key '{key}.vocab_size': {kwargs['vocab_size']}, but {data.describe()} "
            f"has token ids up to {data.vocab - 1}"
        )
    if kwargs.get("max_len", shape[0]) < shape[0]:
        errors.append(f"config key '{key}.max_len': {kwargs['max_len']}, but a client holds {shape[0]} tokens")
    return errors


def dpzv_errors(config: dict) -> list[str]:
    from fedrepro.experiments.dpzv import memory_settings, training_datasets

    section = config["dpzv"]
    errors = []
    memory = memory_settings(config)
    source = config.get("pretrained_source", "pinned")
    for dataset in dict.fromkeys([*training_datasets(config), *memory]):
        key, data_cfg, data = f"dpzv.datasets.{dataset}", section["datasets"][dataset], Data(config, dataset)
        shapes, problems = _client_shapes(f"{key}.partition", data, data_cfg["partition"])
        errors += problems
        if problems:
            continue
        if dataset in training_datasets(config) or "model" not in memory.get(dataset, {}):
            errors += vfl_client_errors(f"{key}.model", data_cfg["model"], data, shapes, source)
        if "model" in memory.get(dataset, {}):
            errors += vfl_client_errors(
                f"dpzv.figures.fig6.datasets[{list(memory).index(dataset)}].model",
                memory[dataset]["model"],
                data,
                shapes,
                source,
            )
    return errors


def fedal_errors(config: dict) -> list[str]:
    section = config["fedal"]
    errors = []
    for exp in section["experiments"].values():
        data = Data(config, exp["dataset"])
        for i, entry in enumerate(section["pools"][exp["pool"]]):
            errors += extractor_errors(
                f"fedal.pools.{exp['pool']}[{i}]", entry["name"], dict(entry.get("options", {})), data
            )
    return list(dict.fromkeys(errors))


# SteFFLe builds no configured model: its logistic regression takes the width of the data, and its
# schema admits only the tabular data sets with a sensitive attribute.
CHECKS = {"fedavg": fedavg_errors, "fedsc": fedsc_errors, "dpzv": dpzv_errors, "fedal": fedal_errors}


def fit_errors(config: dict, papers: list[str], cache: str | Path | None = None) -> list[str]:
    """Every model/data mismatch of the enabled `papers`, each naming its config key; `cache`:
    a JSON file that keeps the model runs between calls (the Snakefile's, in .snakemake/)."""
    global RESULTS
    if cache is not None and (RESULTS.path is None or RESULTS.path != Path(cache)):
        RESULTS = Results(cache)
    errors = [error for paper in papers if paper in CHECKS for error in CHECKS[paper](config)]
    RESULTS.save()
    return errors

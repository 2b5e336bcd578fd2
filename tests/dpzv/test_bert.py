"""DPZV's Amazon text path with a pre-trained BERT client encoder (DPZV §7), end to end on a tiny
randomly initialised BERT built here (hidden 32, 2 layers, a 40-token WordPiece vocabulary), saved
with save_pretrained like a real checkpoint: staging (fedrepro.data.pretrained), tokenisation,
PretrainedBert, the model/data fit check and a DPZV training job."""

import json
import re
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest
import torch

pytest.importorskip("transformers")

from fedrepro.algorithms import methods  # noqa: E402
from fedrepro.data import pretrained, sources  # noqa: E402
from fedrepro.data.arrays import load_prepared  # noqa: E402
from fedrepro.data.partition import make_partition, save_partition  # noqa: E402
from fedrepro.data.prepare import prepare_dataset  # noqa: E402
from fedrepro.experiments import fit  # noqa: E402
from fedrepro.models import build_model  # noqa: E402
from fedrepro.pipeline import make_job  # noqa: E402
from fedrepro.registry import resolve  # noqa: E402
from tests.data.formats import make_amazon_sized  # noqa: E402

SPECIAL = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
WORDS = ["great", "awful", "good", "bad", "love", "broke", "fine", "waste", "superb", "meh", "title"]
PIECES = ["super", "##b", "bro", "##ke", "a", "b", "it", "is", "not", ",", ".", "!"]
VOCAB = SPECIAL + WORDS + PIECES  # 28 tokens, id = position
MAX_POSITIONS = 64


def save_tiny_bert(folder, seed=0):
    """A BERT checkpoint folder as save_pretrained writes it: config.json, model.safetensors,
    vocab.txt, tokenizer.json, tokenizer_config.json."""
    from transformers import BertConfig, BertModel, BertTokenizer

    folder.mkdir(parents=True)
    (folder / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
    tokenizer = BertTokenizer(vocab=str(folder / "vocab.txt"), do_lower_case=True)
    tokenizer.model_max_length = MAX_POSITIONS
    tokenizer.save_pretrained(folder)
    torch.manual_seed(seed)
    config = BertConfig(
        vocab_size=len(VOCAB) + 4,  # an embedding table larger than the vocabulary, as bert-base-uncased's may be
        hidden_size=32,
        num_hidden_layers=2,
        num_attention_heads=2,
        intermediate_size=64,
        max_position_embeddings=MAX_POSITIONS,
        pad_token_id=0,
    )
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return save_tiny_bert(tmp_path_factory.mktemp("checkpoint") / "tiny-bert")


@pytest.fixture(scope="module")
def amazon(tmp_path_factory, bert_dir):
    """Amazon Review Polarity in its real format (.tgz of train.csv/test.csv), prepared with the tiny
    checkpoint's tokenizer; 3 chunks of 16 tokens, one per client."""
    root = tmp_path_factory.mktemp("raw")
    (root / "amazon_polarity").mkdir()
    tgz = root / "amazon_polarity" / sources.raw_files("amazon_polarity")[0]
    make_amazon_sized(tgz, 40, 16)
    with pytest.MonkeyPatch.context() as mp:  # the tiny archive's checksums, not the real one's
        raw = sources.RawFile(tgz.name, (), md5=sources.file_digest(tgz, "md5"))
        mp.setitem(sources.SOURCES, "amazon_polarity", replace(sources.SOURCES["amazon_polarity"], files=(raw,)))
        mp.setattr(sources, "AMAZON_MEMBER_MD5", {})
        options = {"n_train": 40, "n_test": 16, "length": 48, "chunks": 3, "tokenizer": "bert"}
        out = prepare_dataset(
            "amazon_polarity", root.parent / "prepared", root, {**options, "tokenizer_dir": str(bert_dir)}
        )
    return load_prepared(out)


# ------------------------------------------------------------------------------------ staging


def serve(folder, urls):
    """A stand-in for urllib's urlopen that serves `folder`'s files and records the URLs asked for."""

    def urlopen(url, timeout=None):
        urls.append(url)
        return open(folder / url.rsplit("/", 1)[1], "rb")

    return urlopen


def pin(monkeypatch, folder):
    """The pinned revision's manifest, with the tiny checkpoint's sizes and sha256 in place of the real ones."""
    files = tuple(
        pretrained.PinnedFile(f.name, (folder / f.name).stat().st_size, sources.file_digest(folder / f.name))
        for f in pretrained.PINNED.files
    )
    monkeypatch.setattr(pretrained, "PINNED", replace(pretrained.PINNED, files=files))


def test_pinned_revision_downloads_from_canonical_urls_and_checks_every_file(bert_dir, tmp_path, monkeypatch):
    pin(monkeypatch, bert_dir)
    urls = []
    monkeypatch.setattr(sources, "urlopen", serve(bert_dir, urls))
    record = pretrained.stage(tmp_path / "bert", "pinned")
    revision = "86b5e0934494bd15c9632b12f734a8a67f723594"
    names = ["config.json", "tokenizer_config.json", "vocab.txt", "tokenizer.json", "model.safetensors"]
    assert urls == [f"https://huggingface.co/google-bert/bert-base-uncased/resolve/{revision}/{n}" for n in names]
    assert record["revision"] == revision and {f["origin"] for f in record["files"].values()} == {"downloaded"}
    assert record["files"]["vocab.txt"]["sha256"] == sources.file_digest(bert_dir / "vocab.txt")
    assert (tmp_path / "bert" / "model.safetensors").read_bytes() == (bert_dir / "model.safetensors").read_bytes()

    # offline: the copy now in the folder is checked, nothing is downloaded
    monkeypatch.setattr(sources, "urlopen", lambda *a, **k: pytest.fail("downloaded a pre-staged file"))
    again = pretrained.stage(tmp_path / "bert", "pinned", allow_download=False)
    assert {f["origin"] for f in again["files"].values()} == {"pre-staged"}


def test_pinned_prestaged_copy_with_another_checksum_is_refused(bert_dir, tmp_path, monkeypatch):
    pin(monkeypatch, bert_dir)
    folder = tmp_path / "bert"
    folder.mkdir()
    for f in pretrained.PINNED.files:
        (folder / f.name).write_bytes((bert_dir / f.name).read_bytes())
    with open(folder / "vocab.txt", "a") as f:
        f.write("extra\n")
    with pytest.raises(pretrained.StagingError, match="vocab.txt.*sha256.*pretrained_source: custom"):
        pretrained.stage(folder, "pinned", allow_download=False)


def test_pinned_offline_without_files_names_folder_files_and_url(tmp_path):
    with pytest.raises(pretrained.StagingError, match="(?s)not in .*bert.*model.safetensors.*huggingface.co"):
        pretrained.stage(tmp_path / "bert", "pinned", allow_download=False)


def test_shipped_copies_of_the_pinned_files_have_the_pinned_checksums():
    pins = {f.name: f for f in pretrained.PINNED.files}
    for name, shipped in pretrained.SHIPPED.items():
        path = sources.SHIPPED_DIR / shipped
        assert path.stat().st_size == pins[name].size and sources.file_digest(path) == pins[name].sha256
    facts = pretrained.checkpoint_facts("nowhere", "pinned")
    assert facts["config"]["max_position_embeddings"] == 512 and facts["model_max_length"] == 512
    assert facts["config"]["vocab_size"] == facts["vocab"]["size"] == 30522


def test_custom_checkpoint_is_checked_for_form_and_recorded(bert_dir, tmp_path):
    record = pretrained.stage(bert_dir, "custom")
    assert record["source"] == "custom" and record["files"]["model.safetensors"]["sha256"] == sources.file_digest(
        bert_dir / "model.safetensors"
    )
    broken = save_tiny_bert(tmp_path / "wide")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "hidden_size": 64}))
    with pytest.raises(pretrained.StagingError, match=r"word_embeddings.weight has shape \[32, 32\].*\[32, 64\]"):
        pretrained.stage(broken, "custom")
    (broken / "config.json").write_text(json.dumps({**config, "vocab_size": 10}))
    with pytest.raises(pretrained.StagingError, match="vocab.txt has 28 tokens but config.json's vocab_size is 10"):
        pretrained.stage(broken, "custom")
    (broken / "config.json").write_text(json.dumps(config))
    (broken / "vocab.txt").write_text("\n".join(VOCAB[1:]) + "\n")
    with pytest.raises(pretrained.StagingError, match=r"special tokens \['\[PAD\]'\]"):
        pretrained.stage(broken, "custom")
    with pytest.raises(pretrained.StagingError, match="does not exist"):
        pretrained.stage(tmp_path / "missing", "custom")


def test_jobs_depend_on_the_staged_folder_only_with_a_pretrained_encoder():
    spec = {"client_model": "vfl_text_encoder", "client_kwargs": {"pretrained_dir": "data/bert"}}
    assert pretrained.markers(spec) == ["data/bert/.staged.json"]
    assert pretrained.markers({"client_kwargs": {"pretrained_dir": None, "vocab_size": 100}}) == []
    config = {"datasets": {"amazon_polarity": {"tokenizer": "bert", "tokenizer_dir": "data/tok"}}}
    assert pretrained.dataset_markers(config, "amazon_polarity") == ["data/tok/.staged.json"]
    assert pretrained.dataset_markers({"datasets": {"amazon_polarity": {"tokenizer": "hash"}}}, "amazon_polarity") == []
    config["dpzv"] = {"datasets": {"amazon_polarity": {"model": {"options": {"pretrained_dir": "data/bert"}}}}}
    assert pretrained.staged_folders(config, ["dpzv"]) == ["data/tok", "data/bert"]
    assert pretrained.staged_folders(config, []) == ["data/tok"]


# ------------------------------------------------------------------------- tokens and the encoder


def test_amazon_is_tokenised_with_the_checkpoints_wordpiece_vocabulary(amazon):
    x = amazon.x_train
    assert x.shape == (40, 48) and x.dtype == np.int64
    assert amazon.meta["tokenizer"]["vocab_size"] == len(VOCAB) and amazon.meta["tokenizer"]["pad_id"] == 0
    chunks = x.reshape(40, 3, 16)
    assert (chunks[:, :, 0] == VOCAB.index("[CLS]")).all()  # every client's chunk starts with [CLS]
    words = {VOCAB.index(w) for w in WORDS}
    assert set(np.unique(chunks[:, 0, 1:11])) <= words  # "title" + the review's words, none [UNK]


def test_pretrained_bert_loads_the_saved_weights_and_masks_padding(bert_dir):
    from safetensors.torch import load_file

    net = build_model("vfl_text_encoder", pretrained_dir=str(bert_dir), embed_dim=4)
    saved = load_file(str(bert_dir / "model.safetensors"))["embeddings.word_embeddings.weight"]
    assert torch.equal(net.body.bert.embeddings.word_embeddings.weight, saved)
    net.train()  # dropout is off: training-mode outputs are per-sample and repeatable
    short = torch.tensor([[2, 5, 6, 7, 3]])
    padded = torch.tensor([[2, 5, 6, 7, 3, 0, 0, 0]])
    out = net(torch.cat([padded, padded]))
    assert out.shape == (2, 4) and torch.equal(out, net(torch.cat([padded, padded])))
    torch.testing.assert_close(net(short), out[:1], rtol=1e-5, atol=1e-6)


# ------------------------------------------------------------------------------------- fit check


def fit_errors(options, model_options, source="custom", clients=3):
    config = {"datasets": {"amazon_polarity": options}}
    data = fit.Data(config, "amazon_polarity")
    shapes, problems = fit._client_shapes("p", data, {"split": "tokens", "clients": clients})
    model = {"client": "vfl_text_encoder", "options": model_options, "embed_dim": 4}
    return problems + fit.vfl_client_errors("dpzv.datasets.amazon_polarity.model", model, data, shapes, source)


def test_fit_check_accepts_the_tiny_checkpoint_and_names_each_broken_key(bert_dir, tmp_path):
    good = {"length": 48, "chunks": 3, "tokenizer": "bert", "tokenizer_dir": str(bert_dir)}
    model = {"pretrained_dir": str(bert_dir)}
    assert fit_errors(good, model) == []
    key = "config key 'dpzv.datasets.amazon_polarity.model.options"
    positions, tokenizer_limit = fit_errors({**good, "length": 3 * 80}, model)
    assert positions.startswith("config key 'datasets.amazon_polarity.length'") and "80 tokens" in positions
    assert "max_position_embeddings (config.json) 64" in positions
    assert "tokenizer model_max_length (tokenizer_config.json) 64" in tokenizer_limit
    (error,) = fit_errors({**good, "tokenizer": "hash"}, model)
    assert error.startswith("config key 'datasets.amazon_polarity.tokenizer': 'hash'")
    (error,) = fit_errors(good, {**model, "pad_id": 1})
    assert error.startswith(f"{key}.pad_id': 1") and "[PAD] is id 0" in error
    (error,) = fit_errors(good, {**model, "cls_token_id": 3})
    assert error.startswith(f"{key}.cls_token_id': 3") and "[CLS] is id 2" in error
    other = save_tiny_bert(tmp_path / "other")
    (other / "vocab.txt").write_text("\n".join([*VOCAB[:5], *reversed(VOCAB[5:])]) + "\n")
    (error,) = fit_errors({**good, "tokenizer_dir": str(other)}, model)
    assert error.startswith("config key 'datasets.amazon_polarity.tokenizer_dir'")
    (error,) = fit_errors(good, {"pretrained_dir": str(tmp_path / "missing")})
    assert error.startswith(f"{key}.pretrained_dir'") and "does not exist" in error


def test_fit_check_builds_the_checkpoints_architecture(bert_dir, tmp_path):
    broken = save_tiny_bert(tmp_path / "heads")
    config = json.loads((broken / "config.json").read_text())
    (broken / "config.json").write_text(json.dumps({**config, "num_attention_heads": 3}))  # 32 % 3 != 0
    good = {"length": 48, "chunks": 3, "tokenizer": "bert", "tokenizer_dir": str(broken)}
    (error,) = fit_errors(good, {"pretrained_dir": str(broken)})
    assert error.startswith("config key 'dpzv.datasets.amazon_polarity.model.options'") and "attention heads" in error


def test_fit_check_of_the_pinned_checkpoint_needs_no_folder():
    paper = {"length": 384, "chunks": 3, "tokenizer": "bert", "tokenizer_dir": "data/bert-base-uncased"}
    model = {"pretrained_dir": "data/bert-base-uncased"}
    assert fit_errors(paper, model, source="pinned") == []
    error, _ = fit_errors({**paper, "length": 3 * 600}, model, source="pinned")
    assert "600 tokens" in error and "max_position_embeddings (config.json) 512" in error


# ------------------------------------------------------------------------------------ a DPZV job


def test_dpzv_amazon_job_trains_the_pretrained_encoder(amazon, bert_dir, tmp_path, monkeypatch):
    from fedrepro.models import vfl

    loaded, load = [], vfl.PretrainedBert.__init__
    monkeypatch.setattr(
        vfl.PretrainedBert, "__init__", lambda self, *a, **k: loaded.append(a[0]) or load(self, *a, **k)
    )
    data = tmp_path / "data"
    data.mkdir()
    np.savez(
        data / "arrays.npz", x_train=amazon.x_train, y_train=amazon.y_train, x_test=amazon.x_test, y_test=amazon.y_test
    )
    (data / "meta.json").write_text(json.dumps(amazon.meta))
    save_partition(
        make_partition("vertical", {"x_train": amazon.x_train}, split="tokens", clients=3), tmp_path / "part.npz"
    )
    spec = {
        "dataset": "amazon_polarity",
        "method": "dpzv",
        "batch_size": 8,
        "epochs": 1,
        "evals_per_epoch": 1,
        "client_model": "vfl_text_encoder",
        "client_kwargs": {"pretrained_dir": str(bert_dir)},
        "embed_dim": 4,
        "server_hidden": 8,
        "lr_server": 0.05,
        "lr_client": 1e-3,
        "delta": 1e-3,
        "device": "cpu",
        "val": "holdout",
        "val_fraction": 0.2,
        "zo_momentum": 0.9,
        "server_update": "sgd",
        "momentum": 0.9,
        "variants": [{"eps": 1.0, "clip": 10}],
    }
    out = tmp_path / "dpzv/runs/amazon_polarity/dpzv/x/s0"
    job = make_job(
        spec,
        {"metrics": str(out / "metrics.parquet"), "summary": str(out / "summary.json")},
        input={"data": str(data / "arrays.npz"), "partition": str(tmp_path / "part.npz")},
        seeds=[0],
    )
    resolve(methods("dpzv")["dpzv"])(job)
    assert loaded == [str(bert_dir)] * 3  # each of the 3 clients reads the checkpoint
    metrics = pd.read_parquet(out / "metrics.parquet")
    assert len(metrics) == 1 and metrics["server_round"].iloc[0] > 0
    assert np.isfinite(metrics["test_loss"]).all() and metrics["test_acc"].between(0, 1).all()


# ---------------------------------------------------------------------------------- the workflow


def staged_inputs(dry_run: str) -> dict[tuple[str, str], list[bool]]:
    """(rule, dataset) -> for each planned job, whether a staged checkpoint marker is among its inputs
    (a job inside a SLURM group job is listed indented)."""
    jobs: dict[tuple[str, str], list[bool]] = {}
    for block in re.split(r"\n(?=\s*(?:local)?rule \w+:)", dry_run):
        rule = re.match(r"\s*(?:local)?rule (\w+):", block)
        if rule:
            dataset = re.search(r"wildcards: .*?dataset=([^,\s]+)", block)
            key = (rule.group(1), dataset.group(1) if dataset else "")
            jobs.setdefault(key, []).append(pretrained.MARKER in block.split("output:")[0])
    return jobs


@pytest.mark.pipeline
def test_paper_scale_amazon_jobs_wait_for_the_staged_bert_and_no_other_job_does(paper_dry_run):
    """configs/paper.yaml: the pinned BERT is staged once (data/bert-base-uncased), and the Amazon
    preparation (tokenizer: bert) and every Amazon DPZV training and memory job read its marker; no job
    of any other data set (every paper's: tests/conftest.paper_dry_run plans them all) does."""
    assert paper_dry_run["rc"] == 0, (paper_dry_run["stdout"] + paper_dry_run["stderr"])[-3000:]
    dry = paper_dry_run["stdout"]
    jobs = staged_inputs(dry)
    assert jobs[("stage_pretrained", "")] == [False]
    assert "wildcards: folder=data/bert-base-uncased" in dry
    for rule in ("prepare", "dpzv_train", "dpzv_memory"):
        assert all(jobs[(rule, "amazon_polarity")]), rule
    others = {key: marks for key, marks in jobs.items() if key[1] not in ("", "amazon_polarity")}
    assert ("dpzv_train", "mnist") in others and not any(any(marks) for marks in others.values())

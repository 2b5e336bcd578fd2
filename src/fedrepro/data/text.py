"""Builder of the Amazon review polarity data set (tokenized text)."""

from __future__ import annotations

from fedrepro.data import formats, sources
from fedrepro.data.prepared import Built, fetch_raw, xy


def _tokenize(texts, opts):
    if opts["tokenizer"] == "hash":
        return formats.hash_tokenize(texts, opts["length"], opts["chunks"], opts["vocab_size"])
    if opts["tokenizer"] == "bert":
        return formats.bert_tokenize(texts, opts["tokenizer_dir"], opts["length"], opts["chunks"])
    raise ValueError(f"amazon_polarity: tokenizer must be 'hash' or 'bert', got {opts['tokenizer']!r}")


def amazon(data_root, opts) -> Built:
    fetched = fetch_raw("amazon_polarity", data_root, opts)
    t_tr, y_tr, t_te, y_te = formats.read_amazon_polarity(
        fetched[0].path, opts["n_train"], opts["n_test"], opts["seed"], sources.amazon_member_md5())
    x_tr, info = _tokenize(t_tr, opts)
    x_te, _ = _tokenize(t_te, opts)
    return Built(xy(x_tr, y_tr, x_te, y_te),
                 {"class_names": ["negative", "positive"], "tokenizer": info}, fetched)


def amazon_shape(opts) -> tuple[int, ...]:
    """One prepared review: `length` token ids (its `chunks` chunks laid end to end)."""
    return (opts["length"],)

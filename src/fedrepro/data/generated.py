"""Builders of the generated stand-in data sets (fedrepro.data.synthetic, shapes, textures)."""

from __future__ import annotations

from fedrepro.data import synthetic
from fedrepro.data.prepared import Built, xy


def _generator_kwargs(opts: dict) -> dict:
    return {k: v for k, v in opts.items() if k != "source"}


def synthetic_text(data_root, opts) -> Built:
    x_tr, y_tr, x_te, y_te, info = synthetic.synthetic_text(**_generator_kwargs(opts))
    return Built(xy(x_tr, y_tr, x_te, y_te), {"class_names": ["negative", "positive"], "tokenizer": info})


def synthetic_text_shape(opts) -> tuple[int, ...]:
    return (opts["length"],)


def synthetic_multiview(data_root, opts) -> Built:
    arrays = xy(*synthetic.synthetic_multiview(**_generator_kwargs(opts)))
    return Built(arrays, {"views": opts["views"], "num_classes": opts["num_classes"]})


def synthetic_multiview_shape(opts) -> tuple[int, ...]:
    return (opts["views"], opts["channels"], opts["size"], opts["size"])


def synthetic_tabular(data_root, opts) -> Built:
    # imported here: the other generated sets' prepare jobs do not run the tabular code, so its edits re-run
    # only this builder's (fedrepro.codedeps follows a function's own imports)
    from fedrepro.data.tabular import TabularSpec, tabular_arrays

    spec = TabularSpec(
        lambda df: df["income"] == 1,
        "income == 1",
        "sex",
        "Female",
        ("age", "x1", "x2", "x3", "x4"),
        tuple(synthetic.SYNTHETIC_TABULAR_CATEGORIES),
        "age",
    )
    df = synthetic.synthetic_tabular(opts["n"], opts["minority_fraction"], opts["s_effect"], opts["seed"])
    return Built(*tabular_arrays(df, spec, opts["train_fraction"], opts["seed"]))


def shapes(data_root, opts) -> Built:
    from fedrepro.data import shapes as generator

    kwargs = _generator_kwargs(opts)
    kwargs["size_range"] = tuple(kwargs["size_range"])
    return Built(xy(*generator.shapes(**kwargs)), {"class_names": list(generator.CLASS_NAMES)})


def shapes_shape(opts) -> tuple[int, ...]:
    return (3, opts["size"], opts["size"])


def textures(data_root, opts) -> Built:
    from fedrepro.data import textures as generator

    kwargs = _generator_kwargs(opts)
    kwargs["period_range"] = tuple(kwargs["period_range"])
    return Built(xy(*generator.textures(**kwargs)), {"class_names": list(generator.CLASS_NAMES)})


textures_shape = shapes_shape

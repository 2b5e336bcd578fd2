"""Data stage: raw sources, on-disk format readers, preparation to arrays, partitions.

* `catalog`   -- the names, kinds and sizes of every dataset (pure Python).
* `sources`   -- canonical URLs, checksums, pre-staged/shipped copies, `fetch`.
* `formats`   -- readers for each real on-disk format (imports numpy/PIL lazily).
* `synthetic` -- seeded stand-ins used by the quick scale and the tests.
* `prepare`   -- `prepare_dataset` writes `arrays.npz` + `meta.json`; `BUILDERS` names each data
                 set's builder in `images`, `text`, `tabular` or `generated` (one module per family,
                 so that a prepare job depends only on its own family's code) and `prepared` holds
                 what every prepare job runs (options, checks, statistics, writing).
* `arrays`    -- `load_prepared` reads them back.

Nothing heavy is imported here, so `import fedrepro.data.catalog` stays cheap.
"""

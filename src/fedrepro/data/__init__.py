"""Data stage: raw sources, on-disk format readers, preparation to arrays, partitions.

* `catalog`   -- the names, kinds and sizes of every dataset (pure Python).
* `sources`   -- canonical URLs, checksums, pre-staged/shipped copies, `fetch`.
* `formats`   -- readers for each real on-disk format (imports numpy/PIL lazily).
* `synthetic` -- seeded stand-ins used by the quick scale and the tests.
* `prepare`   -- `prepare_dataset` writes `arrays.npz` + `meta.json`.
* `arrays`    -- `load_prepared` reads them back.

Nothing heavy is imported here, so `import fedrepro.data.catalog` stays cheap.
"""

"""CESS: candidate-pool estimates from logged adaptive searches (the CESS paper, section 3, appendix A).

One concept per module:

- ``trajectory``  the JSON Lines trajectory format, its JSON Schema and the validating loader
- ``trajectory_rules`` the tolerances and the error (line or row, field) the validator and the fast checks share
- ``batch``       many trajectories as padded numpy arrays
- ``columns``     many trajectories as flat columns (offsets + per-document and per-round arrays)
- ``fastload``    the JSON Lines loader at scale (ranges in worker processes, the full validator for a bad line)
- ``line_chunk``  a chunk's lines gathered from simdjson's parse (else orjson's) and its numbers checked at once
  (``_line_walk.cpp``: the optional compiled walk of the lines of the canonical shape)
- ``heap``        process memory settings for 10^6 trajectories (freed memory reused)
- ``parquet``     trajectories as Parquet (write, and read with the same rules)
- ``parquet_flat`` the flat Parquet layouts (``flat-1``; ``flat-2``, which ``cess export`` writes)
- ``parquet_batch`` the vectorised checks of one Arrow batch of trajectories (Parquet; numpy views)
- ``estimate_file`` ``cess estimate FILE``: the reader and the pipeline for the file's format
- ``jsonl_lines``, ``parquet_lines`` ``cess estimate --json`` as one pipeline over a file's ranges or row groups
  (``parquet_lines`` makes the table too)
- ``part_lines``  the estimates of one checked part, made where it was checked
- ``in_order``    the parts of a file worked on in threads, the results in the file's order
- ``json_lines``  the ``--json`` lines in the record's own bytes (``_kernels.cpp``: the optional compiled writer
  and round-sum check)
- ``estimate_table`` the table ``cess estimate`` prints without ``--json`` (the extension's two passes)
- ``estimates``   the estimators' results as arrays, the score bounds and the three CESS combinations
- ``estimators``  Opened Mean, OR, sequential IPW and DR (Eq. 6), CESS (Eqs. 9, 12, 13), intervals (Eq. 10)
- ``column_estimators`` the same estimators as segment sums over ``columns``
- ``metrics``     appendix F metrics, intervention effects (Eqs. 3–4), ICC, cluster bootstrap
- ``outcome``     outcome models fit on tuning tasks (tuning mean, closed-form ridge on TF-IDF)
- ``tuning``      λ and the shrink-to-tuning-mean α on the grid 0, 0.05, ..., 1 by tuning-task MAE
- ``text``        tokens and TF-IDF vectors
- ``pool``        the logged pool controller behind a pool-backed ``search`` tool (CRN sampling, stopping)
- ``simulate``    a vectorized simulator of adaptive search over finite pools
- ``experiments`` the paper's controlled experiments (Table 5, appendix A.3, A.4)
- ``perspectrum`` PERSPECTRUM v1.0 claims as candidate pools
- ``searches``    non-LLM controllers searching PERSPECTRUM pools
- ``stop_rules``  the searcher's stop-recommendation rules (for the CLI's options without pydantic)
- ``calibration`` ranking strength of the PERSPECTRUM searches, calibrated on tuning claims
- ``bench``       the PERSPECTRUM benchmark protocol (appendix F)
- ``bench_tables`` its test-set tables (Tables 7, 8, 10, paired question-level CIs)
- ``archive_runs`` archived pool-search runs as trajectories and their estimates (``cess_runs``)
- ``pairs``       P/Q pair contrasts and the 2×2 selection × stopping effects of archived runs
"""

BOOTSTRAP_SEED = 2026092207
"""Bootstrap seed of the paper's ten-round analysis (appendix F); here, not in ``metrics``, so that an analysis
plan names it without loading numpy."""

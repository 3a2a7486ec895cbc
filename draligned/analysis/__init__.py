"""Audit reports over an archive: analysis plans, pure readouts over typed rows, md/html/CSV/Parquet output."""

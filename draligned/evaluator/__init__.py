"""The blinded mirrored evaluator: packets, reads, ingest, aggregation into directional states."""

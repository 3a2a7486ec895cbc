"""The Ray actor that holds each model's connection limit across a cluster (draligned.distributed.ray_run).

A module of its own, importing nothing of draligned: the actor's worker process imports only this, so it
starts in a fraction of the time a task's worker takes (which imports the runner).
"""

from __future__ import annotations


class ModelLimits:
    """The named actor: at most ``limit`` runs of a study's model hold a lease at once, cluster-wide. One per
    driver, shared by the studies it runs (each keys its models by a token of its own). The driver gives
    back each try's lease when the try ended, whether it returned or its worker or node died."""

    def __init__(self) -> None:
        self.holders: dict[str, set[str]] = {}  # study token/model -> leases held

    def try_acquire(self, key: str, limit: int, lease: str) -> bool:
        held = self.holders.setdefault(key, set())
        if lease in held or len(held) < limit:
            held.add(lease)
            return True
        return False

    def release(self, key: str, lease: str) -> None:
        held = self.holders.get(key, set())
        held.discard(lease)
        if not held:
            self.holders.pop(key, None)

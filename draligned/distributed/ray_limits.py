"""The Ray actor that holds each model's connection limit across a cluster (draligned.distributed.ray_run).

A module of its own, importing nothing of draligned: the actor's worker process imports only this, so it
starts in a fraction of the time a task's worker takes (which imports the runner).
"""

from __future__ import annotations


class ModelLimits:
    """The named actor: at most ``limit`` runs of a study's model hold a lease at once, cluster-wide. One per
    driver, shared by the studies it runs (each keys its models by a token of its own)."""

    def __init__(self) -> None:
        self.holders: dict[str, dict[str, str]] = {}  # study token/model -> lease -> node id

    def try_acquire(self, key: str, limit: int, lease: str, node: str) -> bool:
        import ray

        held = self.holders.setdefault(key, {})
        if len(held) >= limit and lease not in held:
            alive = {n["NodeID"] for n in ray.nodes() if n["Alive"]}
            for dead in [k for k, v in held.items() if v not in alive]:  # a lost node's leases come back
                del held[dead]
        if lease in held or len(held) < limit:
            held[lease] = node
            return True
        return False

    def release(self, key: str, lease: str) -> None:
        held = self.holders.get(key, {})
        held.pop(lease, None)
        if not held:
            self.holders.pop(key, None)

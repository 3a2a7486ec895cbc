"""What one ``draligned read`` covers by default and what it did: kept apart from the reading itself, so that a
read whose marks say nothing is left to read answers without loading the packets, the models or the cards
(and the command line sets its defaults without them)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from draligned.records import Record

if TYPE_CHECKING:
    from draligned.evaluator.packets import Phase
    from draligned.evaluator.storage import ReadRecord

PHASES: tuple[Phase, ...] = ("requests", "draft", "final")
"""The phases a read covers unless asked for fewer."""

POLL_S = 30.0
"""Seconds between polls of a running batch job (``read --batch --poll-s``)."""


class ReadSummary(Record):
    """What one ``draligned read`` did."""

    packets: int = 0
    """Packets built (two per unit; identical prompts of different runs count once per run)."""
    blocked: int = 0
    """Packets not sent because they would leak (fail closed)."""
    already_read: int = 0
    """Packets skipped because this evaluator had read them before."""
    read_ok: int = 0
    """Distinct packets read now and ingested."""
    read_failed: int = 0
    """Packets read now whose response failed ingest (READ_FAILED)."""
    model_errors: list[str] = []
    """Packets left unread because the model call raised (tried again next time), and batch jobs that
    failed validation (their lines are submitted again next time)."""
    lines_failed: list[str] = []
    """Batch lines that errored, expired or were canceled: kept as READ_FAILED, read again next time."""
    in_batch: int = 0
    """Packets not read synchronously because an open batch job holds them (``read --batch`` ingests them)."""
    batches_submitted: list[str] = []
    """Batch jobs this call submitted (``--batch``)."""
    batches_resumed: list[str] = []
    """Batch jobs an earlier call submitted that this call polled and ingested (``--batch``)."""

    def count(self, record: ReadRecord) -> None:
        """Count a read made now."""
        if record.status == "OK":
            self.read_ok += 1
        else:
            self.read_failed += 1

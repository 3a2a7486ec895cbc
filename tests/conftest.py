"""Shared fixtures: no network beyond loopback, instant retry waits, and the demo run once per session."""

from __future__ import annotations

import contextlib
import gc
import io
import ipaddress
import os
import shutil
import socket
import sys
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from draligned.cli import main
from draligned.sandbox import WORKSPACE_BASE_ENV

if TYPE_CHECKING:
    from tests.web_servers import PageServer

REPO = Path(__file__).resolve().parent.parent

RAM_DISK = Path("/dev/shm")
RAM_DISK_MIN_FREE = 1 << 30
"""The session's temporary files (a few hundred MB at most) go to the RAM disk only with this much room."""


TEST_GC_THRESHOLD = (10_000, 10, 10)
"""The cyclic collector's thresholds in the test processes (Python's: 700, 10, 10; a study's own while it
runs: draligned.workers.GC_THRESHOLD). With Python's, a worker ran ~5,000 young and ~35 full collections,
each full one walking its ~440,000 objects (modules, collected tests): ~6 CPU-s a worker. Reference
counting frees all but cyclic garbage at once as before; cycles wait a little longer."""


def _cache_bytecode(config: pytest.Config) -> None:
    """Under PYTHONDONTWRITEBYTECODE, compiled modules kept in pytest's cache folder (``pycache``) rather than
    next to the sources: the controller and each xdist worker otherwise rewrite the asserts of every test
    module again (~3 CPU-s a process: half of collecting), and every command a test starts compiles the
    modules it imports again. The sources stay free of ``__pycache__`` as the setting asks. Set in the
    environment too, for those commands (started after this)."""
    cache = getattr(config, "cache", None)  # None under -p no:cacheprovider
    if not sys.dont_write_bytecode or sys.pycache_prefix is not None or cache is None:
        return
    prefix = str(cache.mkdir("pycache"))
    sys.pycache_prefix, sys.dont_write_bytecode = prefix, False  # read by pytest's assertion rewriting too
    os.environ["PYTHONPYCACHEPREFIX"] = prefix
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)


def pytest_configure(config: pytest.Config) -> None:
    """Compiled modules cached (:func:`_cache_bytecode`), the collector's thresholds (TEST_GC_THRESHOLD), and
    temporary directories and the sandbox's workspaces on a RAM disk when the machine has one with room
    (each unless another place was chosen):
    the archive makes every file it writes durable (fsync), which on a disk shared with other work costs
    more wall time than the tests' own work, and the H-W and H-D runs make, fill and remove a workspace
    each (the demo alone ~1,600 files: ~1.5 CPU-s and several seconds of wall more on the disk); on tmpfs
    both are free. Only where the files live changes. Set before any test starts a process, so the forked
    commands, study workers and Ray nodes put their workspaces in the same place."""
    _cache_bytecode(config)
    gc.set_threshold(*TEST_GC_THRESHOLD)
    try:
        room = shutil.disk_usage(RAM_DISK).free if RAM_DISK.is_dir() and os.access(RAM_DISK, os.W_OK) else 0
    except OSError:
        room = 0
    if room < RAM_DISK_MIN_FREE:
        return
    os.environ.setdefault(WORKSPACE_BASE_ENV, str(RAM_DISK))
    if not (os.environ.get("PYTEST_DEBUG_TEMPROOT") or config.option.basetemp):
        os.environ["PYTEST_DEBUG_TEMPROOT"] = str(RAM_DISK)  # read by pytest's tmp_path_factory


def pytest_unconfigure(config: pytest.Config) -> None:
    """Collect until a full pass finds no garbage, then freeze what is left (all of it alive): pytest's five
    full passes that follow (gc_collect_harder, to report finalizers' unraisable errors) then walk nothing,
    where each walked every object a worker had made (~0.4 CPU-s). These passes run under the same
    unraisable hook, so the same errors are reported."""
    for _ in range(5):
        if gc.collect() == 0:
            break
    gc.freeze()


def _is_loopback(address: object) -> bool:
    host = address[0] if isinstance(address, tuple) else address
    if isinstance(host, str) and host in ("localhost",):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return isinstance(address, (str, bytes))  # AF_UNIX paths


def _guard_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Refuse every connection that is not to loopback."""
    real_connect = socket.socket.connect

    def guarded(self: socket.socket, address: object) -> object:
        if not _is_loopback(address):
            raise RuntimeError(f"test tried to reach the network: {address!r}")
        return real_connect(self, address)

    monkeypatch.setattr(socket.socket, "connect", guarded)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tests may talk to loopback servers they start, never to the outside network."""
    _guard_network(monkeypatch)


@pytest.fixture(autouse=True, scope="session")
def _one_worker() -> Iterator[None]:
    """``draligned run`` without ``--workers`` runs on one event loop: the suite already runs on every core
    (pytest-xdist), and a worker process per study (a fork of the fork server, which imports the SDKs)
    would cost seconds. Tests of ``--workers`` say N.
    Set for the session, so that it holds in the module fixtures that run a study too (they are set up
    before any function-scoped fixture)."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("DRALIGNED_WORKERS", "1")
        yield


@pytest.fixture
def web_key(monkeypatch: pytest.MonkeyPatch) -> None:
    """The web backends' test key in the variable the web test studies name."""
    from tests.web_helpers import KEY_ENV
    from tests.web_servers import KEY

    monkeypatch.setenv(KEY_ENV, KEY)


@pytest.fixture
def web_pages() -> Iterator[PageServer]:
    """The loopback page server the web providers' results point to."""
    from tests.web_servers import PageServer

    with PageServer() as server:
        yield server


@pytest.fixture
def repo() -> Path:
    """The checkout root (cards, contracts, corpora live here)."""
    return REPO


def _skip_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    async def no_sleep(seconds: float) -> None:
        return None

    monkeypatch.setattr("draligned.backoff.SLEEP", no_sleep)  # model and web retries alike


@pytest.fixture(autouse=True)
def _instant_retry_waits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Retry waits are recorded as computed but not slept, so retry tests stay fast."""
    _skip_retry_waits(monkeypatch)


@dataclass(frozen=True)
class DemoRun:
    """One ``draligned demo --out OUT`` run: its directory, exit code and what it printed.

    Shared by the whole session, so it is never to be changed: a test that writes or damages takes a
    ``copy`` or a ``linked_copy`` first. The demo run again in place changes nothing (its marks answer),
    which test_demo_rerun_is_free checks.
    """

    out: Path
    code: int
    stdout: str
    stderr: str
    link_source: Path  # where ``linked_copy`` keeps the one full copy its links point to

    def copy(self, dest: Path, part: str = "") -> Path:
        """A private copy at ``dest`` of the demo output (archives, reports and indexes), or of one ``part``
        of it such as ``"archive"``."""
        shutil.copytree(self.out / part, dest, symlinks=True)
        return dest

    def linked_copy(self, dest: Path, part: str = "archive") -> Path:
        """A cheap private copy at ``dest`` of the demo archive ``part``: the files under its folders (blobs,
        run records, reads: written once, never written into) are hard links, the files in its root (index,
        marks, locks) real copies. A test may add or replace files in it (a new inode), never write into a
        linked one. The links are to a full copy made once per session (``link_source``), not to the
        demo's own files: a new link changes a file's ctime, and the demo's archive marks (draligned.archive.
        fingerprint) must keep holding."""
        source = self.link_source / part
        if not source.exists():
            shutil.copytree(self.out / part, source, symlinks=True)
        dest.mkdir(parents=True)
        for entry in source.iterdir():
            if entry.is_dir():
                shutil.copytree(entry, dest / entry.name, copy_function=os.link)
            else:
                shutil.copy2(entry, dest / entry.name)
        return dest


def file_stamps(root: Path) -> dict[str, tuple[int, int, int, int]]:
    """Every file and folder under ``root`` with its inode, size, mtime and ctime: what a write, a removal or
    a replacement changes (a test over the shared demo that must change nothing compares them)."""
    found = {}
    for path in sorted(root.rglob("*")):
        st = path.lstat()
        found[str(path.relative_to(root))] = (st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    return found


@pytest.hookimpl(tryfirst=True)  # before xdist's own hook, which reads the group marks
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test over the demo's output is ``slow``: it needs the full demo run (once per session). All of them
    run in one xdist worker (``--dist loadgroup``), so the demo runs once, not once per worker. The other
    tests that share a built fixture are grouped by it too (:func:`_group_by_shared_fixtures`)."""
    for item in items:
        if "demo_run" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.slow)
            item.add_marker(pytest.mark.xdist_group("demo"))
    _group_by_shared_fixtures(items)
    items.sort(key=lambda item: not _runs_early(item))  # stable: the order is kept within each part


EVERY_TEST = frozenset({"_one_worker"})
"""This conftest's autouse session fixtures: every test has them, so they group nothing."""


def _shared_fixtures(item: pytest.Item) -> list[str]:
    """The fixtures of the suite's own (in tests/) that ``item`` uses and that outlive one test (module-,
    class-, package- or session-scoped, each built once per xdist worker that runs a test using it), each
    named ``<module or folder>.<fixture>``."""
    info = getattr(item, "_fixtureinfo", None)  # pytest's per-test fixture closure
    if info is None:
        return []
    return [f"{Path(d.baseid.split('::')[0]).stem}.{name}" for name, chain in info.name2fixturedefs.items()
            for d in chain[-1:] if d.scope != "function" and d.baseid.startswith("tests") and name not in EVERY_TEST]


def _group_by_shared_fixtures(items: list[pytest.Item]) -> None:
    """Put the tests without an xdist group that share a built fixture (directly or through a chain of
    them, e.g. a module's fixture and the session's ``small_read``) in one group, so each such fixture is
    built by one worker, once (loadgroup would split a module's tests between the workers, each building
    the module's fixture again: the construction pipeline's cards, ~1.8 CPU-s, were built twice)."""
    parent: dict[str, str] = {}

    def root(key: str) -> str:
        while parent.setdefault(key, key) != key:
            key = parent[key]
        return key

    todo = [(item, keys) for item in items if item.get_closest_marker("xdist_group") is None
            and (keys := _shared_fixtures(item))]
    for _, keys in todo:
        for key in keys[1:]:
            parent[root(key)] = root(keys[0])
    groups = Counter(root(keys[0]) for _, keys in todo)
    if len(items) >= MIN_ITEMS_CHECKED and groups and (top := groups.most_common(1)[0])[1] > len(items) // 2:
        raise pytest.UsageError(f"tests/conftest.py: one xdist group, {top[0]!r}, would hold {top[1]} of the "
                                f"{len(items)} tests, so one worker would run them: if a fixture every test "
                                f"uses (autouse) joined it, name it in EVERY_TEST")
    for item, keys in todo:
        item.add_marker(pytest.mark.xdist_group(root(keys[0])))


MIN_ITEMS_CHECKED = 200
"""A run of at least this many tests is refused when one group would take half of them (a run of a few
files may well be one module's tests)."""


def _runs_early(item: pytest.Item) -> bool:
    """A ``slow`` test outside any xdist group that shares no module- or class-scoped fixture runs before
    the rest: the workers take tests in this order, so the last few they end with are quick ones and both
    end at about the same time, rather than one finishing a multi-process study alone (test_workers.py,
    collected last). One sharing a module's fixture stays with its module, which would build it again."""
    if item.get_closest_marker("slow") is None or item.get_closest_marker("xdist_group") is not None:
        return False
    info = getattr(item, "_fixtureinfo", None)  # pytest's per-test fixture closure
    defs = info.name2fixturedefs.values() if info is not None else ()
    return all(d.scope in ("function", "session") for chain in defs for d in chain)


@pytest.fixture(scope="session")
def demo_run(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    """The full offline demo (both parts, with the simulator evaluator), run once through the CLI entry."""
    out = tmp_path_factory.mktemp("shared-demo") / "demo"
    stdout, stderr = io.StringIO(), io.StringIO()
    with pytest.MonkeyPatch.context() as mp, contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        _guard_network(mp)  # the per-test guards are not set up yet for a session fixture
        _skip_retry_waits(mp)
        code = main(["demo", "--out", str(out)])
    return DemoRun(out=out, code=code, stdout=stdout.getvalue(), stderr=stderr.getvalue(),
                   link_source=out.parent / "link-source")


@pytest.fixture(scope="session")
def small_read(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """(study file, its archive): a one-card H00 study ("small", travel_budget_en) after one run and one
    read by the SIMULATOR evaluator, built once per session. Never to be changed: tests copy it."""
    from tests.study_helpers import write_study

    tmp = tmp_path_factory.mktemp("small-read")
    study = write_study(tmp, ["travel_budget_en.json"], name="small")
    with pytest.MonkeyPatch.context() as mp:
        _guard_network(mp)  # the per-test guards are not set up yet for a session fixture
        _skip_retry_waits(mp)
        assert main(["run", str(study)]) == 0
        assert main(["read", str(tmp / "archive"), "--evaluator", str(REPO / "evaluators" / "sim.toml")]) == 0
    return study, tmp / "archive"


@dataclass(frozen=True)
class SmallReport:
    """``draligned report`` of a copy of ``small_read``'s archive, with neither ``--plan`` nor ``--no-verify``."""

    archive: Path
    out: Path
    stderr: str


@pytest.fixture(scope="session")
def small_report(small_read: tuple[Path, Path], tmp_path_factory: pytest.TempPathFactory) -> SmallReport:
    """The report of a copy of ``small_read``'s archive and what it printed on stderr, built once per session
    for the tests that only read it (a report is ~1.5 CPU-s, most of it drawing the figures). Never to be
    changed."""
    tmp = tmp_path_factory.mktemp("small-report")
    archive, out, stderr = Path(shutil.copytree(small_read[1], tmp / "archive")), tmp / "report", io.StringIO()
    with contextlib.redirect_stderr(stderr):
        assert main(["report", str(archive), "--out", str(out)]) == 0
    return SmallReport(archive=archive, out=out, stderr=stderr.getvalue())

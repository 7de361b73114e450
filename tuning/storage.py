"""Optuna storages for tsmix studies: embedded sqlite, a journal file, or PostgreSQL.

A study may be worked on by many ``tsmix tune`` processes at once. Three things make that
safe, whatever the backend:

* a **claim lock** (``filelock`` on a file next to sqlite/journal files, ``pg_advisory_lock``
  on PostgreSQL) held while a worker counts the trials and asks for a new one, so N workers
  together run exactly ``trials`` trials, never one more;
* a **heartbeat** per running trial (Optuna's own for RDB storages; a system attribute for
  the journal, which Optuna gives no heartbeat), recorded as soon as the trial exists;
* **stale-trial failing**: a running trial whose heartbeat stopped (its worker was killed)
  is marked FAIL by the next worker that looks, and stops counting towards the total.
"""

from __future__ import annotations

import contextlib
import hashlib
import threading
import time
import warnings
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import optuna
from optuna.exceptions import ExperimentalWarning, UpdateFinishedTrialError
from optuna.trial import FrozenTrial, TrialState

from tsmix.errors import TsmixError

DEFAULT_STORAGE = "sqlite:///optuna.db"  # relative: the working directory
JOURNAL_SUFFIXES = (".log", ".journal", ".jsonl")  # a bare path with these is a journal file
LOCK_SUFFIX = ".tsmix-lock"  # claim-lock file beside a sqlite/journal file (ignored by git)
SCHEMA_LOCK = "tsmix-storage-schema"  # PostgreSQL advisory lock held while a storage creates its tables
HEARTBEAT_ATTR = "tsmix:heartbeat"  # journal storages: unix time of the last heartbeat

StaleCallback = Callable[[optuna.Study, FrozenTrial], None]


def pg_driver() -> str:
    """The installed PostgreSQL driver for a URL that names none: SQLAlchemy 2.1 defaults to
    psycopg (3), while tsmix's extras install psycopg2, so a bare postgresql:// would not load."""
    from importlib.util import find_spec

    return "psycopg2" if find_spec("psycopg") is None and find_spec("psycopg2") is not None else "psycopg"


def resolve_storage_url(url: str | None) -> tuple[str, str, str]:
    """``(kind, url, target)``: kind is sqlite | postgresql | journal; target the file or db.

    Relative sqlite and journal paths are made absolute so every worker started in the
    same directory (and the lock file beside them) agrees on one file.
    """
    url = (url or DEFAULT_STORAGE).strip()
    if url.startswith("journal:"):
        path = url[len("journal:") :]
        path = path[2:] if path.startswith("///") else path  # journal:///abs/path
        return "journal", url, str(Path(path).expanduser().resolve())
    if "://" not in url:
        if url.endswith(JOURNAL_SUFFIXES):
            return "journal", url, str(Path(url).expanduser().resolve())
        raise TsmixError(
            f"storage {url!r} is not a URL; use sqlite:///study.db, journal:PATH (or a path ending "
            f"in {', '.join(JOURNAL_SUFFIXES)}) or postgresql+psycopg2://user@host/db"
        )
    scheme = url.split("://", 1)[0].lower()
    if scheme == "sqlite":
        from sqlalchemy.engine import make_url

        db = make_url(url).database
        if not db or db == ":memory:":
            raise TsmixError("an in-memory sqlite storage cannot hold a study; use sqlite:///study.db")
        path = Path(db).expanduser().resolve()
        if not path.parent.is_dir():
            raise TsmixError(f"storage folder {path.parent} does not exist; create it or fix --storage")
        return "sqlite", f"sqlite:///{path}", str(path)
    if scheme in ("postgres", "postgresql") or scheme.startswith("postgresql+"):
        if scheme in ("postgres", "postgresql"):  # no driver named: the one that is installed
            url = f"postgresql+{pg_driver()}" + url[len(scheme) :]
        return "postgresql", url, _redact(url)
    raise TsmixError(
        f"unsupported storage scheme {scheme!r}; use sqlite:///study.db, journal:PATH or "
        f"postgresql+psycopg2://user@host:5432/db"
    )


def advisory_key(study_name: str) -> int:
    """The PostgreSQL advisory-lock key (a signed bigint) of a study's claim lock."""
    return _bigint(f"tsmix-study:{study_name}")


def _bigint(name: str) -> int:
    digest = hashlib.sha1(name.encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


@contextlib.contextmanager
def _advisory_lock(engine: Any, key: int) -> Iterator[None]:
    from sqlalchemy import text

    with engine.connect() as conn:
        # Session-level: the server drops it if the worker dies while holding it.
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": key})
        try:
            yield
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": key})
            conn.commit()


@contextlib.contextmanager
def creation_lock(kind: str, url: str, target: str) -> Iterator[None]:
    """Held while a storage is opened for the first time, i.e. while it creates or migrates its tables.

    Workers started together on a fresh database would otherwise both see no tables and both run
    CREATE TABLE; the slower one fails ("table trials already exists", or a duplicate version row).
    sqlite: the claim-lock file beside the database; PostgreSQL: an advisory lock of the database.
    """
    if kind == "sqlite":
        from filelock import FileLock

        with FileLock(target + LOCK_SUFFIX):
            yield
    elif kind == "postgresql":
        from sqlalchemy import create_engine

        engine = create_engine(url, pool_size=1, connect_args={"connect_timeout": 10})
        try:
            with _advisory_lock(engine, _bigint(SCHEMA_LOCK)):
                yield
        finally:
            engine.dispose()
    else:  # a journal file appends under its own lock: nothing to create
        yield


def _redact(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)


@dataclass
class StudyStorage:
    """An Optuna storage plus the claim lock and the heartbeat that go with it."""

    kind: str  # "sqlite" | "postgresql" | "journal"
    url: str  # the URL as Optuna sees it
    target: str  # file path (sqlite/journal) or password-free URL (postgresql), for messages
    optuna: Any  # optuna.storages.BaseStorage
    heartbeat: int  # seconds between heartbeats of a running trial
    grace: int  # seconds without heartbeat after which a running trial is stale
    on_stale: StaleCallback | None = None  # journal only (RDB storages call it themselves)
    _engine: Any = field(default=None, repr=False)  # PostgreSQL: engine of the advisory lock

    # ---- the claim lock -------------------------------------------------------------
    @contextlib.contextmanager
    def lock(self, study_name: str) -> Iterator[None]:
        """Exclusive across processes (and machines, for PostgreSQL) for one study."""
        if self.kind == "postgresql":
            yield from self._pg_lock(study_name)
        else:
            yield from self._file_lock()

    def _file_lock(self) -> Iterator[None]:
        from filelock import FileLock  # an OS lock: released by the kernel if the process dies

        with FileLock(self.target + LOCK_SUFFIX):
            yield

    def _pg_lock(self, study_name: str) -> Iterator[None]:
        from sqlalchemy import create_engine

        if self._engine is None:
            self._engine = create_engine(self.url, pool_size=1, pool_pre_ping=True)
        with _advisory_lock(self._engine, advisory_key(study_name)):
            yield

    # ---- heartbeat ------------------------------------------------------------------
    def trial_id(self, study_name: str, number: int) -> int:
        """The storage id of trial ``number`` of a study (Optuna's public storage API)."""
        study_id = self.optuna.get_study_id_from_name(study_name)
        return self.optuna.get_trial_id_from_study_id_trial_number(study_id, number)

    def beat(self, trial_id: int) -> None:
        """Record that the trial's worker is alive."""
        if self.kind == "journal":
            self.optuna.set_trial_system_attr(trial_id, HEARTBEAT_ATTR, time.time())
        else:
            self.optuna.record_heartbeat(trial_id)

    @contextlib.contextmanager
    def heartbeat_thread(self, trial_id: int) -> Iterator[None]:
        """Beat every ``heartbeat`` seconds in a daemon thread while the trial runs."""
        stop = threading.Event()

        def loop() -> None:
            while not stop.wait(self.heartbeat):
                try:
                    self.beat(trial_id)
                except UpdateFinishedTrialError:  # another worker judged us stale: stop
                    return
                except Exception as exc:  # a transient storage error must not kill the trial
                    warnings.warn(f"heartbeat of trial id {trial_id} failed: {exc}", stacklevel=1)

        thread = threading.Thread(target=loop, name=f"tsmix-heartbeat-{trial_id}", daemon=True)
        thread.start()
        try:
            yield
        finally:
            stop.set()
            thread.join()

    def fail_stale(self, study: optuna.Study) -> list[int]:
        """Mark FAIL every running trial whose heartbeat stopped; their numbers."""
        before = {t.number for t in study.get_trials(deepcopy=False, states=(TrialState.RUNNING,))}
        if not before:
            return []
        if self.kind == "journal":
            self._fail_stale_journal(study)
        else:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", ExperimentalWarning)
                optuna.storages.fail_stale_trials(study)  # runs on_stale via the storage
        states = {t.number: t.state for t in study.get_trials(deepcopy=False)}
        return sorted(n for n in before if states.get(n) == TrialState.FAIL)

    def _fail_stale_journal(self, study: optuna.Study) -> None:
        now = time.time()
        study_id = self.optuna.get_study_id_from_name(study.study_name)
        for t in study.get_trials(deepcopy=True, states=(TrialState.RUNNING,)):
            last = t.system_attrs.get(HEARTBEAT_ATTR)
            if last is None and t.datetime_start is not None:
                last = t.datetime_start.timestamp()
            if last is None or now - float(last) <= self.grace:
                continue
            trial_id = self.optuna.get_trial_id_from_study_id_trial_number(study_id, t.number)
            try:
                self.optuna.set_trial_state_values(trial_id, state=TrialState.FAIL)
            except UpdateFinishedTrialError:  # another worker failed it first
                continue
            if self.on_stale is not None:
                self.on_stale(study, self.optuna.get_trial(trial_id))

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()
            self._engine = None
        if hasattr(self.optuna, "remove_session"):
            self.optuna.remove_session()
        engine = getattr(self.optuna, "engine", None)
        if engine is not None:
            engine.dispose()


def open_storage(
    url: str | None,
    *,
    heartbeat: int = 60,
    grace: int | None = None,
    on_stale: StaleCallback | None = None,
) -> StudyStorage:
    """Open (creating if needed) the storage behind ``--storage``; TsmixError if unreachable."""
    kind, url, target = resolve_storage_url(url)
    if not isinstance(heartbeat, int) or heartbeat <= 0:
        raise TsmixError(f"heartbeat must be a positive number of seconds, got {heartbeat!r}")
    grace = 2 * heartbeat if grace is None else grace
    if not isinstance(grace, int) or grace <= heartbeat:
        raise TsmixError(f"grace ({grace!r}) must be an int of seconds above the heartbeat ({heartbeat})")
    if kind == "journal":
        from optuna.storages import JournalStorage
        from optuna.storages.journal import JournalFileBackend

        try:  # a journal is a plain file: its folder is made like the file itself
            Path(target).parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise TsmixError(f"cannot create the journal folder {Path(target).parent}: {exc.strerror}; "
                             f"fix --storage") from exc
        storage = JournalStorage(JournalFileBackend(target))
        return StudyStorage(kind, url, target, storage, heartbeat, grace, on_stale=on_stale)

    import sqlalchemy.exc

    engine_kwargs: dict[str, Any] = {"pool_pre_ping": True}
    if kind == "sqlite":
        engine_kwargs["connect_args"] = {"timeout": 60}  # wait for other workers' writes
    else:
        engine_kwargs["connect_args"] = {"connect_timeout": 10}
    try:
        with creation_lock(kind, url, target), warnings.catch_warnings():
            warnings.simplefilter("ignore", ExperimentalWarning)
            storage = optuna.storages.RDBStorage(
                url,
                engine_kwargs=engine_kwargs,
                heartbeat_interval=heartbeat,
                grace_period=grace,
                heartbeat_stale_trial_callback=on_stale,
            )
    except sqlalchemy.exc.OperationalError as exc:
        reason = str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
        raise TsmixError(
            f"cannot open the study storage {target}: {reason}; start the database server or fix "
            f"--storage"
        ) from exc
    except ImportError as exc:
        raise TsmixError(f"storage {target} needs a database driver ({exc}); pip install psycopg2-binary "
                         "or name the installed one, e.g. postgresql+psycopg2://") from exc
    return StudyStorage(kind, url, target, storage, heartbeat, grace)

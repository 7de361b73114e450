"""Workers started together on fresh stores (#17): the Optuna storage and the MLflow tracking store
each create their tables once, under a lock beside the database, and every worker opens them."""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Callable
from pathlib import Path

import pytest

WORKERS = 3  # processes released together by a barrier
ROUNDS = 2  # fresh databases per test: the race needs the processes to collide, so give it chances


def _open_optuna(db: Path, barrier: mp.synchronize.Barrier) -> None:
    from tsmix.tuning.storage import open_storage

    barrier.wait()
    open_storage(f"sqlite:///{db}").close()


def _open_mlflow(db: Path, barrier: mp.synchronize.Barrier) -> None:
    from tsmix.tuning.tracking import check_tracking

    barrier.wait()
    check_tracking(f"sqlite:///{db}", "race")


def start_together(target: Callable[[Path, mp.synchronize.Barrier], None], db: Path) -> list[int | None]:
    """Exit codes of WORKERS forked processes running ``target(db)`` at the same instant."""
    ctx = mp.get_context("fork")  # the parent's imports are inherited: the children start in step
    barrier = ctx.Barrier(WORKERS)
    procs = [ctx.Process(target=target, args=(db, barrier)) for _ in range(WORKERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(300)
    return [p.exitcode for p in procs]


@pytest.mark.parametrize("target", [_open_optuna, _open_mlflow], ids=["optuna", "mlflow"])
def test_fresh_sqlite_store_opened_by_workers_at_once(tmp_path, capfd, target):
    import mlflow  # noqa: F401  (imported before forking, like a worker that is about to open it)
    import optuna

    from tsmix.tuning.storage import LOCK_SUFFIX

    for i in range(ROUNDS):
        db = tmp_path / f"round{i}" / "store.db"
        db.parent.mkdir()
        assert start_together(target, db) == [0] * WORKERS, capfd.readouterr().err[-3000:]
        assert Path(str(db) + LOCK_SUFFIX).is_file()  # the lock lives beside the database
    if target is _open_optuna:  # the schema is whole: a study can be created and used
        study = optuna.create_study(storage=f"sqlite:///{db}", study_name="after")
        study.optimize(lambda t: t.suggest_float("x", 0, 1), n_trials=1)
        assert len(study.trials) == 1

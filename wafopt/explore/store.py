"""The result store: one SQLite row per evaluation, keyed by a hash of design, workload, fidelity,
budget and package version, so an interrupted run resumes where it stopped and a repeated run
does no work."""

from __future__ import annotations

import hashlib
import json
import sqlite3
from pathlib import Path

from wafopt.core.version import __version__

SCHEMA = """
CREATE TABLE IF NOT EXISTS evaluations (
    key TEXT PRIMARY KEY,
    design TEXT NOT NULL,
    workload TEXT NOT NULL,
    fidelity TEXT NOT NULL,
    result TEXT NOT NULL
)"""


STORE_LOCK_TIMEOUT_S = 30.0   # another run writing the same store holds its lock for one batch at most
LADDER = 2   # the fidelity methods' version: results stored by an older ladder are not reused


def task_key(design: dict, workload_sha: str, fidelity: str, budget: float | None) -> str:
    text = json.dumps({"design": design, "workload": workload_sha, "fidelity": fidelity, "budget": budget,
                       "version": __version__, "ladder": LADDER}, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()


class Store:
    """A SQLite file (or an in-memory database for path None)."""

    def __init__(self, path: str | Path | None):
        self.path = str(path) if path else ":memory:"
        if path:
            Path(path).parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(self.path, timeout=STORE_LOCK_TIMEOUT_S)
        # a rollback journal, not WAL: every commit lands in the file itself, so the .sqlite alone
        # holds every finished batch, even after a kill (a store left in WAL mode is folded back in)
        self.db.execute("PRAGMA journal_mode=DELETE")
        self.db.execute(SCHEMA)
        self.db.commit()

    def get(self, key: str) -> dict | None:
        row = self.db.execute("SELECT result FROM evaluations WHERE key = ?", (key,)).fetchone()
        return None if row is None else json.loads(row[0])

    def put_many(self, rows: list[tuple[str, str, str, str, dict]]) -> None:
        """(key, design, workload, fidelity, result) rows, committed together: a run killed at any
        point keeps every batch it finished."""
        self.db.executemany("INSERT OR REPLACE INTO evaluations VALUES (?, ?, ?, ?, ?)",
                            [(k, d, w, f, json.dumps(r)) for k, d, w, f, r in rows])
        self.db.commit()

    def count(self) -> int:
        return self.db.execute("SELECT COUNT(*) FROM evaluations").fetchone()[0]

    def close(self) -> None:
        self.db.commit()
        self.db.close()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

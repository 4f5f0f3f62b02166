"""Run Alembic migrations programmatically (embedded start-up, tests, ``python -m service.db.migrate``)."""

from __future__ import annotations

from functools import cache
from pathlib import Path

from alembic import command
from alembic.config import Config
from alembic.script import ScriptDirectory
from sqlalchemy import Engine, text
from sqlalchemy.exc import SQLAlchemyError

ROOT = Path(__file__).resolve().parents[2]


def alembic_config(url: str) -> Config:
    cfg = Config(str(ROOT / "alembic.ini"))
    cfg.set_main_option("script_location", str(ROOT / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    cfg.attributes["configure_logging"] = False
    return cfg


def upgrade(engine: Engine) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.begin() as conn:
        cfg.attributes["connection"] = conn
        command.upgrade(cfg, "head")


@cache
def head_revision() -> str | None:
    return ScriptDirectory.from_config(alembic_config("postgresql+psycopg://")).get_current_head()


def is_current(engine: Engine) -> tuple[bool, str | None]:
    """Whether the database is at the head revision (a plain query: readiness probes call this often)."""
    with engine.connect() as conn:
        try:
            revision = conn.execute(text("SELECT version_num FROM alembic_version")).scalar()
        except SQLAlchemyError:
            return False, None
    return revision == head_revision(), revision


if __name__ == "__main__":
    from service.db.engine import make_engine
    from service.settings import Settings

    settings = Settings()
    upgrade(make_engine(settings.effective_database_url))
    print("database at", head_revision())

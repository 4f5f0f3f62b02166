"""``python -m service``: the API on uvicorn (embedded mode unless LETHE_MODE=production)."""

from __future__ import annotations

import logging

import uvicorn

from service.app import create_app
from service.settings import Settings


def main() -> None:
    settings = Settings()
    logging.basicConfig(
        level=settings.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s"
    )
    logging.getLogger(__name__).info(
        "starting Lethe in %s mode: database %s, worker %s",
        settings.mode,
        settings.effective_database_url.split("@")[-1],
        settings.effective_worker,
    )
    uvicorn.run(
        create_app(settings), host=settings.host, port=settings.port, log_level=settings.log_level.lower()
    )


if __name__ == "__main__":
    main()

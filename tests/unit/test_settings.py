"""service.settings: values read from the environment as a deployment writes them."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from service.settings import Settings, settings_errors


def test_an_empty_artifact_dir_is_unset_not_the_working_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    # A compose file's ${LETHE_ARTIFACT_DIR:-} sets the variable to "" (Path("") is ".").
    monkeypatch.setenv("LETHE_ARTIFACT_DIR", "")
    settings = Settings(var_dir=Path("/srv/lethe"))
    assert settings.artifact_dir is None
    assert settings.effective_artifact_dir == Path("/srv/lethe/artifacts")
    monkeypatch.setenv("LETHE_ARTIFACT_DIR", "/data/blobs")
    assert Settings().effective_artifact_dir == Path("/data/blobs")


def test_each_problem_names_its_environment_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LETHE_PORT", "abc")
    monkeypatch.setenv("LETHE_MAX_BATCH", "0")
    with pytest.raises(ValidationError) as caught:
        Settings()
    lines = settings_errors(caught.value)
    assert len(lines) == 2
    assert lines[0].startswith("LETHE_PORT: Input should be a valid integer")
    assert lines[1].startswith("LETHE_MAX_BATCH: Input should be greater than")

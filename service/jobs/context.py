"""What the jobs use of the process's runtime, as narrow protocols :class:`service.runtime.Runtime` meets."""

from __future__ import annotations

from typing import Protocol

from service.jobs.state import BlobCache, KnownManifests
from service.queue import TaskQueue
from service.settings import Settings
from service.storage.artifacts import ArtifactStore
from service.storage.hot import HotStore
from service.subjects import SubjectHasher
from service.uow import UnitOfWork


class CompletionContext(Protocol):
    """What publishing and completing a version use of the process's runtime."""

    @property
    def artifacts(self) -> ArtifactStore: ...
    @property
    def cache(self) -> BlobCache: ...
    @property
    def hot(self) -> HotStore: ...
    def uow(self) -> UnitOfWork: ...


class UpdateContext(CompletionContext, Protocol):
    """What a deletion update uses of the process's runtime."""

    @property
    def settings(self) -> Settings: ...
    @property
    def hasher(self) -> SubjectHasher: ...
    @property
    def manifests(self) -> KnownManifests: ...
    @property
    def queue(self) -> TaskQueue: ...

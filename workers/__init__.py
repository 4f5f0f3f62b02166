"""Celery workers: thin adapters from task messages to :mod:`service.jobs`."""

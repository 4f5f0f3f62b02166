"""Job functions run by workers (Celery or the in-process worker): training, updates, retraining."""

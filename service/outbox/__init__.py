"""Transactional outbox: work is written with the data and handed to the queue after commit."""

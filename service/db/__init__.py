"""Persistence: SQLAlchemy tables, engine set-up and the unit of work."""

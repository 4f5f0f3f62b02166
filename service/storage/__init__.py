"""Stores other than the database: the content-addressed artifact store and the Redis hot store."""

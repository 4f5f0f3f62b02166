"""What an operator watches, derived from the system of record: worker liveness records in Redis
(:mod:`.liveness`) and gauges computed from Postgres at scrape time (:mod:`.collector`)."""

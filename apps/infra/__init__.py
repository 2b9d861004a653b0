"""The ground floor's infrastructure: what every app leans on and nothing of the portal's own.

Redis (redisconf.py: one configuration, redis.py: the connections, broker.py: Celery's transport
over Sentinel), the Celery app (celery.py, with the queue names and beat's scheduler), the liveness
marks of workers and beat (heartbeat.py), logging (logs.py) and the settings' helpers (dburl.py,
errors.py). Nothing here imports an app: docs/architecture.md draws the floors above it.
"""

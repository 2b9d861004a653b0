"""Celery tasks (thin wrappers around services) and the framework-free rule-set compiler."""

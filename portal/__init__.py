"""The network portal's Django project package: settings and the URL root (urls.py, api_urls.py).

The Celery app lives on the ground floor (apps/infra/celery.py); it is named here so that
`celery -A portal` finds it and `shared_task` binds to it as soon as Django reads the settings.
"""

from apps.infra.celery import app as celery_app

__all__ = ["celery_app"]

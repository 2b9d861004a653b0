"""Operations, the top floor: what reads across every app to run the portal as a whole.

The Prometheus metrics and the health check (metrics.py: /metrics, /healthz), the retention of
every table that grows with time (retention.py, the beat task workers.retention.retention_run),
the demo data (management/commands/seed_demo.py) and the landing page that sends each role to
its work (views.py: /). Nothing below imports this app.
"""

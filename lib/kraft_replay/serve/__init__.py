"""Serving layer: the ``kraft-replay`` CLI (and later the Airflow DAGs and the dashboard)."""

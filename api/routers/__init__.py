"""The REST API's routers: one per resource (jobs, UltraServers, placements, queues and
budgets, accounting, explanations), plus health, the dashboard page and the offline /docs.

Routers only translate HTTP to a `Backend` call and back (`ultraplane.api.backends`); their
one-line docstrings become the OpenAPI text.
"""

"""The service layer: the daemon, its state store and leases, and its HTTP endpoint.

Modules are imported one by one (``from maintd.service.store import StateStore``) so that the CLI
pays for SQLAlchemy, APScheduler or prometheus_client only when it uses them.
"""

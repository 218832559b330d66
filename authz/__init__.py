"""authz package."""

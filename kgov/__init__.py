"""kgov composition root: settings, app assembly, CLI. No domain logic lives here."""

__version__ = "0.1.0"

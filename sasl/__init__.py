"""sasl package."""

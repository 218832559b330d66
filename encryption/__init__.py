"""encryption package."""

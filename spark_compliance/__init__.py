"""spark_compliance package."""

"""One local Spark session for the whole test session (local[2], 2 shuffle partitions, no UI)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pyspark.sql import SparkSession

from spark_compliance.session import build_session


@pytest.fixture(scope="session")
def spark() -> Iterator[SparkSession]:
    session = build_session("local[2]", app_name="kgov-tests", shuffle_partitions=2)
    yield session
    session.stop()

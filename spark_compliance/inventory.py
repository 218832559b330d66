"""The ACL inventory (`kgov acls export`) and the topic-classification file, as small DataFrames.

Inventory (kgov's export, JSON)::

    {"exported_at": "2024-05-01T00:00:00Z", "cluster_id": "...",
     "acls": [{"resource_type": "TOPIC", "resource_name": "orders", "pattern_type": "LITERAL",
               "principal": "User:alice", "host": "*", "operation": "READ", "permission": "ALLOW"}],
     "role_bindings": [{"principal": "Group:sales", "role": "DeveloperRead", "resource_type": "TOPIC",
                        "resource_name": "orders-", "pattern_type": "PREFIXED"}],
     "super_users": ["User:admin"]}

Topic classification (JSON, this package's format)::

    {"topics": [{"name": "customers", "pattern_type": "LITERAL", "classes": ["PII"],
                 "approved_principals": ["User:crm"]},
                {"name": "payments.", "pattern_type": "PREFIXED", "classes": ["PCI"]}],
     "subjects": [{"subject": "patients-value", "tags": ["PHI"], "approved_principals": []}]}

- `classes`: any labels; PII, PCI and PHI map to GDPR, PCI DSS and HIPAA in the findings.
- `approved_principals`: who may access the data; access by anyone else is a SENSITIVE_ACCESS finding.
  Omitted: nobody is approved, so every access is reported.
- `subjects`: schema-registry subjects with their tags (e.g. the registry's `tags` metadata); the topic
  is derived by the default TopicNameStrategy (`<topic>-key` / `<topic>-value`, in any context); a subject
  named otherwise is refused. `kgov audit classify` writes this part from a registry (`registry_tags.py`).

Both files are read through Spark (any Hadoop file system) and parsed on the driver: they are small.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import ArrayType, StructType

from spark_compliance.registry_tags import topic_of

ACL_DDL = ("resource_type string, resource_name string, pattern_type string, principal string, host string, "
           "operation string, permission string")
BINDING_DDL = "principal string, role string, resource_type string, resource_name string, pattern_type string"
CLASSIFICATION_DDL = ("name string, pattern_type string, classes array<string>, "
                      "approved_principals array<string>")


class InventoryError(ValueError):
    """An inventory or classification file that cannot be used; the message says which field."""


@dataclass(frozen=True, slots=True)
class Inventory:
    acls: DataFrame
    role_bindings: DataFrame
    super_users: tuple[str, ...]
    cluster_id: str | None
    exported_at: str | None


def local_frame(spark: SparkSession, rows: Sequence[Sequence[Any]], ddl: str) -> DataFrame:
    """A small driver-side table as a DataFrame computed in the JVM alone: the rows travel as one JSON
    literal. (`createDataFrame` of a Python list is an RDD that starts a Python worker on every scan,
    which cost the reports that join the inventory seconds each.)"""
    schema = StructType.fromDDL(ddl)
    assert isinstance(schema, StructType)  # fromDDL is typed as DataType
    doc = json.dumps([dict(zip(schema.fieldNames(), row, strict=True)) for row in rows])
    return spark.range(1).select(F.inline(F.from_json(F.lit(doc), ArrayType(schema)))).select(*schema.fieldNames())


def read_json_file(spark: SparkSession, path: str) -> Any:
    text = "\n".join(r.value for r in spark.read.text(path, wholetext=True).collect())
    try:
        return json.loads(text)
    except json.JSONDecodeError as e:
        raise InventoryError(f"{path}: not JSON ({e.msg} at line {e.lineno})") from None


def _text(entry: dict[str, Any], key: str, where: str, default: str | None = None) -> str | None:
    value = entry.get(key, default)
    if value is not None and not isinstance(value, str):
        raise InventoryError(f"{where}: '{key}' must be a string")
    return value


def parse_inventory(doc: Any) -> tuple[list[tuple[str | None, ...]], list[tuple[str | None, ...]], tuple[str, ...],
                                       str | None, str | None]:
    if not isinstance(doc, dict):
        raise InventoryError("inventory: expected a JSON object")
    acls: list[tuple[str | None, ...]] = []
    for i, a in enumerate(doc.get("acls") or []):
        where = f"inventory acls[{i}]"
        if not isinstance(a, dict):
            raise InventoryError(f"{where}: expected an object")
        rt, name, pt = _text(a, "resource_type", where), _text(a, "resource_name", where), _text(
            a, "pattern_type", where, "LITERAL")
        principal, host = _text(a, "principal", where), _text(a, "host", where, "*")
        op, perm = _text(a, "operation", where), _text(a, "permission", where, "ALLOW")
        if rt is None or name is None or principal is None or op is None:
            raise InventoryError(f"{where}: resource_type, resource_name, principal and operation are required")
        acls.append((rt.upper(), name, (pt or "LITERAL").upper(), principal, host or "*", op.upper(),
                     (perm or "ALLOW").upper()))
    bindings: list[tuple[str | None, ...]] = []
    for i, b in enumerate(doc.get("role_bindings") or []):
        where = f"inventory role_bindings[{i}]"
        if not isinstance(b, dict) or not b.get("principal") or not b.get("role"):
            raise InventoryError(f"{where}: principal and role are required")
        bindings.append((_text(b, "principal", where), _text(b, "role", where),
                         _text(b, "resource_type", where), _text(b, "resource_name", where),
                         _text(b, "pattern_type", where)))
    supers = doc.get("super_users") or []
    if not isinstance(supers, list) or not all(isinstance(s, str) for s in supers):
        raise InventoryError("inventory: 'super_users' must be a list of principals")
    return acls, bindings, tuple(supers), _text(doc, "cluster_id", "inventory"), _text(doc, "exported_at", "inventory")


def load_inventory(spark: SparkSession, path: str | None) -> Inventory:
    acls: list[tuple[str | None, ...]] = []
    bindings: list[tuple[str | None, ...]] = []
    supers: tuple[str, ...] = ()
    cluster_id = exported_at = None
    if path is not None:
        acls, bindings, supers, cluster_id, exported_at = parse_inventory(read_json_file(spark, path))
    return Inventory(local_frame(spark, acls, ACL_DDL), local_frame(spark, bindings, BINDING_DDL),
                     supers, cluster_id, exported_at)


def parse_classification(doc: Any) -> list[tuple[str, str, list[str], list[str]]]:
    if not isinstance(doc, dict):
        raise InventoryError("classification: expected a JSON object")
    rows: list[tuple[str, str, list[str], list[str]]] = []
    for i, t in enumerate(doc.get("topics") or []):
        where = f"classification topics[{i}]"
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise InventoryError(f"{where}: 'name' is required")
        pattern = str(t.get("pattern_type", "LITERAL")).upper()
        if pattern not in ("LITERAL", "PREFIXED"):
            raise InventoryError(f"{where}: pattern_type must be LITERAL or PREFIXED")
        rows.append((t["name"], pattern, _strings(t, "classes", where), _strings(t, "approved_principals", where)))
    for i, s in enumerate(doc.get("subjects") or []):
        where = f"classification subjects[{i}]"
        if not isinstance(s, dict) or not isinstance(s.get("subject"), str):
            raise InventoryError(f"{where}: 'subject' is required")
        topic = topic_of(s["subject"])
        if topic is None:
            raise InventoryError(f"{where}: subject {s['subject']!r} does not name a topic (TopicNameStrategy: "
                                 "'<topic>-key' or '<topic>-value'); list its topic under 'topics' instead")
        rows.append((topic, "LITERAL", _strings(s, "tags", where), _strings(s, "approved_principals", where)))
    return rows


def _strings(entry: dict[str, Any], key: str, where: str) -> list[str]:
    value = entry.get(key) or []
    if not isinstance(value, list) or not all(isinstance(x, str) for x in value):
        raise InventoryError(f"{where}: '{key}' must be a list of strings")
    return [x.upper() if key in ("classes", "tags") else x for x in value]


def load_classification(spark: SparkSession, path: str | None) -> DataFrame:
    rows = parse_classification(read_json_file(spark, path)) if path is not None else []
    return local_frame(spark, rows, CLASSIFICATION_DDL)

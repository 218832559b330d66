"""Compliance audits of Kafka and kgov audit logs on Spark (PySpark only; imports nothing of kgov but `audit`).

Use::

    kgov audit generate --lines 100000 --seed 1 --out ./audit-demo      # synthetic logs + planted.json
    kgov audit run --input ./audit-demo --out ./audit-out                # local[*]
    kgov audit run --input /logs/brokers /logs/gateway --inventory acls.json --classification classes.json \\
        --out ./audit-out --since 2024-04-01 --until 2024-05-01 --log-timezone broker-7=Europe/Berlin

On a cluster, ship this package and `audit` and submit the job module unchanged::

    zip -r kgov-audit.zip spark_compliance audit
    spark-submit --master spark://host:7077 --py-files kgov-audit.zip \\
        spark_compliance/job.py --input hdfs:///logs --out hdfs:///audit-out

Inputs (any mix, any nesting, .gz fine; a file's source is the name of its directory):
Kafka `kafka.authorizer.logger` lines of every generation (0.9-1.x, 2.0-2.3, 2.4-3.x ZooKeeper with the
super-user and no-ACL DEBUG lines, 3.3+ KRaft with rules), request logs (1.0-2.7 text, 2.8+ JSON, Fetch
v13+ topic ids resolved through Metadata responses, follower fetches dropped), `Failed authentication`
lines from server.log, kgov's CloudEvents and Confluent's audit events. The ACL inventory is
`kgov acls export`'s JSON; the classification format is documented in `spark_compliance.inventory`.

Outputs: `events/` (the normalised table, Parquet by `dt`), `reports/<report>/` (Parquet, one per
report), `findings.json`, `summary.json` (line counts per source and kind, sampled bad lines) and
`report.html` (self-contained, no script). Rules: see `spark_compliance.findings.RULES`.

Modules: `kafka_lines` (formats and patterns), `schema`, `ingest`, `inventory`, `reports` (pure
DataFrame -> DataFrame), `findings`, `html_report`, `job`, `generator`, `reference_parser`, `cli`.
"""

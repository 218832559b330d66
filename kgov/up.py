"""`kgov up`: the whole platform on embedded defaults, for a laptop or a demo.

Dev mode: SQLite and audit files under `--data-dir`, a bootstrap admin whose password is generated
and shown once (kept only as a hash, in memory and in the credential store).
"""

from __future__ import annotations

import argparse
import secrets
import sys

from pydantic import SecretStr


def run_up(args: argparse.Namespace) -> int:
    import uvicorn

    from kgov.app import build_app
    from kgov.settings import load_settings

    data_dir = args.data_dir
    data_dir.mkdir(parents=True, exist_ok=True)
    settings = load_settings(getattr(args, "config", None), db=getattr(args, "db", None), data_dir=data_dir,
                             dev_mode=True)
    password = None
    if settings.admin.password is None:
        password = secrets.token_urlsafe(18)
        settings.admin.password = SecretStr(password)
    app = build_app(settings)
    url = f"http://{args.host}:{args.port}"
    print("kgov is starting (dev mode)", file=sys.stderr)
    print(f"  control plane : {url}   (health: {url}/health, API docs: {url}/docs)")
    print(f"  database      : {settings.database_url}")
    print(f"  audit trail   : {settings.audit_dir}")
    print(f"  admin         : User:{settings.admin.user}")
    if password is not None:
        print(f"  admin password: {password}   (shown once; set KGOV_ADMIN__PASSWORD to choose your own)")
    print("  try           : curl -u " + f"{settings.admin.user}:<password> {url}/v3/clusters")
    sys.stdout.flush()
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    return 0

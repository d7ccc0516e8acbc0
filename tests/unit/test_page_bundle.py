"""The GPU Quotas page's committed bundle (airflow_quota/api/static/app/main.umd.cjs) is built from the
current sources (airflow_quota/api/www): its build records a hash of them in sources.json, recomputed here the
same way (www/record-sources.mjs). A source changed without a rebuild fails, saying how to rebuild."""

from __future__ import annotations

import hashlib
import json
import re
from pathlib import Path

from airflow_quota.ledger.models import AuditKind

API = Path(__file__).resolve().parents[2] / "airflow_quota" / "api"
WWW = API / "www"
APP = API / "static" / "app"
TOP = ("package.json", "package-lock.json", "tsconfig.json", "vite.config.ts")
REBUILD = "rebuild it: cd airflow_quota/api/www && npm ci && npm run build (then commit static/app)"


def sources() -> list[str]:
    found = [*TOP, *(path.relative_to(WWW).as_posix() for path in (WWW / "src").rglob("*") if path.is_file())]
    return sorted(found)


def sources_hash(files: list[str]) -> str:
    digest = hashlib.sha256()
    for name in files:
        digest.update(name.encode() + b"\0")
        digest.update((WWW / name).read_bytes())
        digest.update(b"\0")
    return digest.hexdigest()


def test_the_committed_bundle_is_built_from_the_current_sources() -> None:
    record = json.loads((APP / "sources.json").read_text())
    files = sources()
    assert record["files"] == files, f"the page's source files changed since its bundle was built: {REBUILD}"
    assert record["sha256"] == sources_hash(files), (
        f"the page's sources changed since its bundle was built: {REBUILD}"
    )
    bundle = (APP / "main.umd.cjs").read_text()
    assert "AirflowPlugin" in bundle and "ChakraUI" in bundle  # a UMD library on the host's Chakra UI


def test_the_page_offers_every_decision_kind_of_the_audit_log() -> None:
    page = (WWW / "src" / "QueuesPage.tsx").read_text()
    listed = re.search(r"DECISION_KINDS = \[(.*?)\];", page, re.S)
    assert listed is not None
    assert re.findall(r'"([A-Z_]+)"', listed.group(1)) == [kind.value for kind in AuditKind]


def test_node_modules_are_not_packaged() -> None:
    ignored = (API.parents[1] / ".gitignore").read_text().split()
    assert "node_modules/" in ignored

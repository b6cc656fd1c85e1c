"""The REST API's OpenAPI document against a real ``cairn serve``: it validates (``openapi-spec-validator``), a
client generated from it by a generator from the package registry (``openapi-python-client``) builds and
imports, and one of its calls reaches the server and reads the answer."""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import httpx
from openapi_spec_validator import validate

from conftest import Server


def test_the_openapi_document_validates_and_a_generated_client_calls_the_api(server: Server,
                                                                              tmp_path: Path) -> None:
    doc = httpx.get(f"{server.api_url}/openapi.json", timeout=10).json()
    validate(doc)
    spec = tmp_path / "openapi.json"
    spec.write_text(json.dumps(doc))
    package = tmp_path / "cairn_api_client"
    generated = subprocess.run(
        [sys.executable, "-m", "openapi_python_client", "generate", "--path", str(spec), "--meta", "none",
         "--output-path", str(package), "--fail-on-warning"],
        capture_output=True, text=True, timeout=300,
        # The generator formats its output with ruff, installed beside it in this environment.
        env={**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"})
    assert generated.returncode == 0, generated.stdout + generated.stderr
    sys.path.insert(0, str(tmp_path))
    try:
        client_module = importlib.import_module("cairn_api_client")
        list_actions = importlib.import_module("cairn_api_client.api.default.list_actions")
        client = client_module.AuthenticatedClient(base_url=server.api_url, token=server.api_token)
        answer = list_actions.sync_detailed(client=client)
    finally:
        sys.path.remove(str(tmp_path))
        for name in [m for m in sys.modules if m == "cairn_api_client" or m.startswith("cairn_api_client.")]:
            del sys.modules[name]
    assert answer.status_code == 200
    names = {a["name"] for a in json.loads(answer.content)["actions"]}
    assert {"noop", "http.request", "notify.send"} <= names

"""demo/trigger_round.py, which ``scripts/demo.sh`` runs for each round, against a stand-in api-server.

The stand-in (a FAKE: ``http.server`` on 127.0.0.1, not Airflow) answers what Airflow's api-server answers
when its SQLite is busy (500 "Database error", the run perhaps made all the same), which a real Airflow
does not do on demand; the demo's real runs are tests/e2e/test_demo_command.py's.
"""

from __future__ import annotations

import contextlib
import json
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.scripts import load_script

trigger_round = load_script("demo/trigger_round.py")


class FakeApiServer(ThreadingHTTPServer):
    """Logs in ``admin`` with the password ``secret``; answers each DAG-run POST with the next status of
    ``answers`` (200 once they run out) and records the POSTs; knows the DAGs of ``parsed`` (a GET of
    another answers 404, as the api-server does for a DAG the dag processor has not written yet)."""

    def __init__(self, answers: list[int], parsed: frozenset[str] = frozenset()) -> None:
        super().__init__(("127.0.0.1", 0), FakeApiHandler)
        self.answers = answers
        self.parsed = parsed
        self.posts: list[tuple[str, dict[str, object]]] = []

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


class FakeApiHandler(BaseHTTPRequestHandler):
    server: FakeApiServer

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/auth/token":
            ok = body == {"username": "admin", "password": "secret"}
            self.answer(201 if ok else 401, {"access_token": "token"} if ok else {"detail": "bad login"})
            return
        assert self.headers["Authorization"] == "Bearer token"
        self.server.posts.append((self.path, body))
        status = self.server.answers.pop(0) if self.server.answers else 200
        self.answer(status, {"detail": "Database error" if status == 500 else "answered"})

    def do_GET(self) -> None:
        assert self.headers["Authorization"] == "Bearer token"
        dag_id = self.path.removeprefix("/api/v2/dags/")
        found = dag_id in self.server.parsed
        self.answer(200 if found else 404, {"dag_id": dag_id} if found else {"detail": "not found"})

    def answer(self, status: int, body: dict[str, object]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def airflow_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "simple_auth_manager_passwords.json.generated").write_text('{"admin": "secret"}')
    monkeypatch.setenv("AIRFLOW_HOME", str(tmp_path))
    monkeypatch.setattr(trigger_round, "RETRY_SECONDS", 0.0)
    return tmp_path


@contextlib.contextmanager
def serve(answers: list[int], parsed: frozenset[str] = frozenset()) -> Iterator[FakeApiServer]:
    server = FakeApiServer(answers, parsed)
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    try:
        yield server
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.usefixtures("airflow_home")
@pytest.mark.parametrize(
    ("case", "answers", "code", "posts"),
    [
        ("each DAG gets one run under the round's run id", [], 0, 2),
        ("a busy database's 500 is tried again", [500], 0, 3),
        ("a 409 after a 500 means the first try made the run", [500, 409], 0, 3),
        ("a 409 on the first try is an error: the run id was taken", [409], 1, 1),
        ("three 500s in a row are an error", [500, 500, 500], 1, 3),
        ("a 4xx is not tried again", [400], 1, 1),
    ],
)
def test_a_round_is_triggered_through_the_rest_api(
    case: str, answers: list[int], code: int, posts: int, capsys: pytest.CaptureFixture[str]
) -> None:
    with serve(answers) as server:
        assert trigger_round.main([server.url, "demo-1", "dag_a", "dag_b"]) == code, case
        assert len(server.posts) == posts, (case, server.posts)
        assert {body["dag_run_id"] for _, body in server.posts} == {"demo-1"}
        assert server.posts[0][0] == "/api/v2/dags/dag_a/dagRuns"
    error = capsys.readouterr().err
    assert ("demo: could not trigger run demo-1" in error) == (code == 1), error


def test_a_wrong_password_says_it_could_not_trigger_and_posts_nothing(
    airflow_home: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (airflow_home / "simple_auth_manager_passwords.json.generated").write_text('{"admin": "wrong"}')
    with serve([]) as server:
        assert trigger_round.main([server.url, "demo-1", "dag_a"]) == 1
        assert server.posts == []
    assert "401" in capsys.readouterr().err


@pytest.mark.usefixtures("airflow_home")
@pytest.mark.parametrize(
    ("case", "known", "code"),
    [
        ("every DAG parsed", {"dag_a", "dag_b"}, 0),
        ("one DAG not parsed yet (404)", {"dag_a"}, 1),
        ("none parsed yet", set(), 1),
    ],
)
def test_parsed_says_whether_the_dag_processor_wrote_every_dag(case: str, known: set[str], code: int) -> None:
    with serve([], frozenset(known)) as server:
        assert trigger_round.main(["--parsed", server.url, "dag_a", "dag_b"]) == code, case
        assert server.posts == []


def test_parsed_is_not_yet_while_nothing_answers_or_no_password_was_generated(airflow_home: Path) -> None:
    with serve([], frozenset({"dag_a"})) as server:
        url = server.url
    assert trigger_round.main(["--parsed", url, "dag_a"]) == 1  # nothing listens there any more
    (airflow_home / "simple_auth_manager_passwords.json.generated").unlink()
    with serve([], frozenset({"dag_a"})) as server:
        assert trigger_round.main(["--parsed", server.url, "dag_a"]) == 1

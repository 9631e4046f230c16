"""Controller notifications through a webhook, against real local HTTP servers: one that fails
the first attempt and then accepts, and a dead one (a bound port nobody listens on)."""

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from app.controller import store
from app.controller.notify import WebhookNotifier
from tests.controller.logs import progress, script_error, text
from tests.controller.test_controller_service import FixedProber, audit, controller, failed_job, local  # noqa: F401


class Hook:
    """A webhook endpoint: answers 503 to the first `fail_first` POSTs, then 200."""

    def __init__(self, fail_first: int) -> None:
        self.bodies: list[dict] = []
        hook = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                hook.bodies.append(body)
                code = 503 if len(hook.bodies) <= fail_first else 200
                self.send_response(code)
                self.send_header("Content-Length", "2")
                self.end_headers()
                self.wfile.write(b"ok")

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/hooks/T000/B000"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def hook():
    h = Hook(fail_first=1)
    yield h
    h.close()


@pytest.fixture
def dead_url():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))  # bound, never listening: every connection is refused
    yield f"http://127.0.0.1:{s.getsockname()[1]}/hook"
    s.close()


def notify_rows(app, job_id, *, settled: bool = True, timeout_s: float = 20.0):
    deadline = time.monotonic() + timeout_s
    while True:
        rows = [a for a in audit(app, job_id) if a["kind"] == "notify"]
        if not settled or (rows and rows[0]["status"] != "sending") or time.monotonic() > deadline:
            return rows
        time.sleep(0.05)


def script_failure(app, client, sched, local, tmp_path):  # noqa: F811
    job_id, ext, _ = failed_job(client, sched, local, tmp_path, text(progress(1, 30), script_error()))
    app.state.services.db.run(store.set_cluster_control, cluster="c1", actions_enabled=True, actor="admin")
    return job_id


def test_the_owner_is_told_through_the_webhook_after_a_failed_first_attempt(app, client, sched, local, tmp_path, hook):  # noqa: F811
    job_id = script_failure(app, client, sched, local, tmp_path)
    ctl = controller(app, local, FixedProber([]))
    ctl.notifier = WebhookNotifier(hook.url, retries=3, timeout_s=2, backoff_s=0.1)
    run = ctl.recover(job_id=job_id, actor="test")
    assert run.action == "notify_owner" and run.status == "done"
    ctl.notifier.join(10)
    assert len(hook.bodies) == 2 and hook.bodies[0] == hook.bodies[1]  # 503, retried, 200
    body = hook.bodies[1]
    assert "KeyError" in body["text"] or "script" in body["text"].lower(), body["text"]  # Slack shows `text`
    assert (body["event"], body["to"], body["job_id"], body["action"]) == ("notify", "owner", job_id, "notify_owner")
    row = notify_rows(app, job_id)[0]
    assert row["status"] == "done" and row["result"]["delivery"] == {
        "delivered": True, "attempts": 2, "status_code": 200, "error": None}


def test_a_dead_webhook_neither_blocks_nor_breaks_the_recovery(app, client, sched, local, tmp_path, dead_url):  # noqa: F811
    job_id = script_failure(app, client, sched, local, tmp_path)
    ctl = controller(app, local, FixedProber([]))
    ctl.notifier = WebhookNotifier(dead_url, retries=2, timeout_s=2, backoff_s=1.0)
    t0 = time.monotonic()
    run = ctl.recover(job_id=job_id, actor="test")
    took = time.monotonic() - t0
    assert run.status == "done" and "error" not in run.outcome
    assert took < 1.0, f"recover waited {took:.2f} s for the webhook (backoff alone is 3 s)"
    ctl.notifier.join(20)
    row = notify_rows(app, job_id)[0]
    assert row["status"] == "failed", row
    delivery = row["result"]["delivery"]
    assert not delivery["delivered"] and delivery["attempts"] == 3 and "Connect" in delivery["error"]


def test_a_dry_run_records_the_message_and_sends_nothing(app, client, sched, local, tmp_path, hook):  # noqa: F811
    job_id, _, _ = failed_job(client, sched, local, tmp_path, text(progress(1, 30), script_error()))
    ctl = controller(app, local, FixedProber([]))
    ctl.notifier = WebhookNotifier(hook.url, retries=0, timeout_s=2, backoff_s=0)
    assert ctl.recover(job_id=job_id, actor="test").dry_run
    ctl.notifier.join(5)
    row = notify_rows(app, job_id)[0]
    assert hook.bodies == [] and row["result"]["delivery"] == "not sent: dry run" and row["result"]["message"]


def test_the_webhook_comes_from_settings_and_its_url_stays_secret(tmp_path, hook):
    from app.controller.factory import build_notifier
    from app.settings import Settings

    assert build_notifier(Settings(data_dir=tmp_path)) is None
    settings = Settings(data_dir=tmp_path, notify_webhook_url=hook.url, notify_webhook_retries=1,
                        notify_webhook_backoff_s=0)
    assert "T000" not in repr(settings)
    result = build_notifier(settings).deliver({"text": "hello"})
    assert (result.delivered, result.attempts) == (True, 2) and hook.bodies == [{"text": "hello"}] * 2

"""Alert webhooks against replays (docs/alerts.md, "Webhooks"): the delivery id is in
the signed body, so the receiver docs/alerts.md documents, executed as written, drops a
delivery handled before and refuses a copy whose id was changed."""

import json
import re
from pathlib import Path

from runs.alerts import webhook

SECRET = "whsec-test"


def documented_receiver() -> dict:
    """The receiver snippet of docs/alerts.md ("Webhooks"), executed as written."""
    text = (Path(__file__).resolve().parent.parent / "docs" / "alerts.md").read_text()
    [code] = [block for block in re.findall(r"```python\n(.*?)```", text, re.S)
              if "def receive" in block]
    scope: dict = {}
    exec(compile(code, "docs/alerts.md", "exec"), scope)
    return scope


def delivery(delivery_id: str) -> tuple[bytes, dict]:
    payload = webhook.delivery_payload("https://hooks.example.com/a", SECRET,
                                       {"type": "alert", "total": 1}, delivery_id)
    return payload["body"].encode(), payload["headers"]


def test_the_delivery_id_is_in_the_signed_body():
    body, headers = delivery("webhook-7-41")

    assert json.loads(body)["delivery"] == headers[webhook.DELIVERY_HEADER] == "webhook-7-41"
    assert webhook.verify(SECRET, body, headers[webhook.SIGNATURE_HEADER])


def test_a_replay_is_dropped_and_a_copy_under_a_new_delivery_id_refused():
    body, headers = delivery("webhook-7-41")
    signature = headers[webhook.SIGNATURE_HEADER]
    receive = documented_receiver()["receive"]

    assert receive(SECRET, body, signature) == 202
    assert receive(SECRET, body, signature) == 200  # the same delivery again: dropped
    renamed = body.replace(b'"webhook-7-41"', b'"webhook-7-42"')
    assert renamed != body
    assert receive(SECRET, renamed, signature) == 401
    assert not webhook.verify(SECRET, renamed, signature)

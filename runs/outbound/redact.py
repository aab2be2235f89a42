"""What of an http job's payload may be shown (docs/security.md, "Encrypted values"): the
one redaction every output path uses (the REST API's job, workflow and bulk answers,
the admin's pages), so neither a secret header's value nor its ciphertext leaves the
database; and the scrub of error text, so a value the transport echoes is not stored in
a run's error or log.
"""

HTTP_HANDLER = "http"
REDACTED = "(encrypted)"  # what is shown in place of an encrypted header's token
# The payload key holding the job's seal (secrets.Binding): the scheduler's own, neither
# shown nor taken from clients.
SEAL = "seal"
SCRUBBED = "(header value withheld)"


def redacted(payload):
    """``payload`` (an http job's, as stored) for display: each encrypted header's token
    replaced by REDACTED, the seal left out. Anything that is not such a payload is
    returned as it is."""
    if not isinstance(payload, dict):
        return payload
    shown = {key: value for key, value in payload.items() if key != SEAL}
    sealed = payload.get("encrypted_headers")
    if isinstance(sealed, dict):
        shown["encrypted_headers"] = {name: REDACTED for name in sealed}
    elif "encrypted_headers" in payload:
        shown["encrypted_headers"] = REDACTED
    return shown


def shown_payload(handler: str, payload):
    """The payload of a job of ``handler`` as the API and the admin show it: an http
    job's redacted (``redacted``), any other handler's as it is."""
    return redacted(payload) if handler == HTTP_HANDLER else payload


def scrub(text: str, values) -> str:
    """``text`` (an error or log message) with every one of ``values`` (header values,
    text) replaced by SCRUBBED, as written and as Python's bytes repr shows them (h11
    says ``Illegal header value b' x'``). Values of fewer than 4 characters are left:
    they would scrub unrelated text and cannot hide much."""
    for value in sorted({v for v in values if isinstance(v, str) and len(v) >= 4},
                        key=len, reverse=True):
        forms = {value, repr(value)[1:-1]}
        try:
            forms.add(repr(value.encode("utf-8"))[2:-1])
        except UnicodeError:
            pass
        for form in sorted(forms, key=len, reverse=True):
            text = text.replace(form, SCRUBBED)
    return text

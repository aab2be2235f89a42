"""Re-encrypt the stored secret headers of the http jobs (``manage.py rotatehttpsecrets``
and the jobs migration that bound them; docs/security.md, "Encrypted values"): each
token under the current SECRET_KEY, and each one encrypted before values were bound to
their job (the bare value) sealed for its job's owner, a new seal of the job and its
header name.

A token held by jobs of more than one owner is bound in none: a Fernet token is never
made twice, so it was copied from one owner's job into another's (when tokens were
shown and accepted back), and which one is the original cannot be told. Those jobs'
runs fail until the value is given again.
"""

from dataclasses import dataclass, field

from django.db import transaction

from runs.outbound import secrets
from runs.outbound.redact import SEAL

BATCH = 500


@dataclass
class Resealed:
    """What ``reseal`` did: how many jobs it rewrote, and the ids of the jobs holding a
    token no key opens (``undecryptable``) or one shared across owners (``shared``)."""

    rewritten: int = 0
    undecryptable: list[int] = field(default_factory=list)
    shared: list[int] = field(default_factory=list)


def _http_jobs(job_model, using: str):
    return job_model.objects.using(using).filter(
        handler="http", payload__has_key="encrypted_headers").order_by("pk")


def _owners_by_token(job_model, using: str) -> dict[str, set]:
    owners: dict[str, set] = {}
    for owner_id, payload in _http_jobs(job_model, using).values_list(
            "owner_id", "payload").iterator(chunk_size=BATCH):
        for token in (payload.get("encrypted_headers") or {}).values():
            owners.setdefault(token, set()).add(owner_id)
    return owners


def reseal(job_model, using: str = "default") -> Resealed:
    """Re-encrypt every http job's secret headers under the current key (``job_model``:
    the Job model, or a migration's historical one), binding the ones encrypted before
    values were bound; returns a Resealed. A job with a token no key opens, or one held
    by another owner's job too, keeps its tokens as they are (its runs then fail,
    naming the header)."""
    shared_tokens = {token for token, owners in _owners_by_token(job_model, using).items()
                     if len(owners) > 1}
    done = Resealed()
    ids = list(_http_jobs(job_model, using).values_list("pk", flat=True))
    for start in range(0, len(ids), BATCH):
        with transaction.atomic(using=using):
            for job in job_model.objects.using(using).select_for_update().filter(
                    pk__in=ids[start:start + BATCH]).order_by("pk"):
                payload = dict(job.payload)
                sealed = payload.get("encrypted_headers") or {}
                if any(token in shared_tokens for token in sealed.values()):
                    done.shared.append(job.pk)
                    continue
                seal = payload.get(SEAL) or secrets.new_seal()
                try:
                    payload["encrypted_headers"] = {
                        name: secrets.bind_legacy(
                            token, secrets.Binding(job.owner_id, seal, name))
                        for name, token in sealed.items()}
                except (secrets.Undecryptable, UnicodeError, AttributeError):
                    done.undecryptable.append(job.pk)
                    continue
                if sealed:
                    payload[SEAL] = seal
                job.payload = payload
                job.save(update_fields=["payload"])
                done.rewritten += 1
    return done

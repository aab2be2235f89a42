"""The REST API's request parser: JSON with a body-size cap of its own.

DRF (3.18) reads a JSONParser's body through Django's ``request.body``, where
DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB, meant for form posts) refuses a bigger body with a
400 in HTML before any API cap is looked at: a valid 10,000-job bulk body of 2.8 MB was
refused that way. This parser is not a JSONParser subclass, so DRF hands it the raw
request stream; it checks the API's own cap (API_MAX_BODY_BYTES, or the view's
``max_body_setting`` tunable: the bulk endpoint's is larger) before reading, reads at most
that much, and leaves the decoding to DRF's JSONParser (docs/api.md, "Caps").
"""

import io

from rest_framework import renderers, status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import BaseParser, JSONParser

from scheduler_core import conf


class RequestTooLarge(APIException):
    """The request body is larger than the API accepts."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class CappedJSONParser(BaseParser):
    """JSON bodies up to a size cap (413 beyond it); JSON nested too deeply for the
    decoder is a 400 rather than a RecursionError."""

    media_type = "application/json"
    renderer_class = renderers.JSONRenderer

    def parse(self, stream, media_type=None, parser_context=None):
        context = parser_context or {}
        view, request = context.get("view"), context.get("request")
        setting = getattr(view, "max_body_setting", "API_MAX_BODY_BYTES")
        cap = conf.get(setting)
        length = content_length(request)
        if length > cap:
            raise RequestTooLarge(f"The request body is {length} bytes; the cap is {cap}.")
        body = stream.read(cap + 1) if stream is not None else b""
        if len(body) > cap:  # a Content-Length that understated the body
            raise RequestTooLarge(f"The request body is over the cap of {cap} bytes.")
        try:
            return JSONParser().parse(io.BytesIO(body), media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


def content_length(request) -> int:
    """The request's Content-Length in bytes (a Django or DRF request, or None); 0 when
    absent or not a number."""
    if request is None:
        return 0
    meta = request.META
    try:
        return max(int(meta.get("CONTENT_LENGTH") or meta.get("HTTP_CONTENT_LENGTH") or 0), 0)
    except (TypeError, ValueError):
        return 0

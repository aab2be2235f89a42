"""The REST API's request parser: JSON with a body-size cap.

DRF's JSONParser reads the request stream directly, so Django's
DATA_UPLOAD_MAX_MEMORY_SIZE never applies to JSON bodies: without a cap here a client
could make the server parse a body of any size. The cap is API_MAX_BODY_BYTES, or the
view's ``max_body_setting`` tunable (the bulk endpoint's is larger).
"""

from rest_framework import status
from rest_framework.exceptions import APIException, ParseError
from rest_framework.parsers import JSONParser

from jobs import conf


class RequestTooLarge(APIException):
    """The request body is larger than the API accepts."""

    status_code = status.HTTP_413_REQUEST_ENTITY_TOO_LARGE
    default_detail = "The request body is too large."
    default_code = "request_too_large"


class CappedJSONParser(JSONParser):
    """JSON bodies up to a size cap (413 beyond it); JSON nested too deeply for the
    decoder is a 400 rather than a RecursionError."""

    def parse(self, stream, media_type=None, parser_context=None):
        context = parser_context or {}
        view, request = context.get("view"), context.get("request")
        setting = getattr(view, "max_body_setting", "API_MAX_BODY_BYTES")
        cap = conf.get(setting)
        length = _content_length(request)
        if length > cap:
            raise RequestTooLarge(f"The request body is {length} bytes; the cap is {cap}.")
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - nested too deeply") from None


def _content_length(request) -> int:
    if request is None:
        return 0
    meta = request.META
    try:
        return int(meta.get("CONTENT_LENGTH") or meta.get("HTTP_CONTENT_LENGTH") or 0)
    except (TypeError, ValueError):
        return 0

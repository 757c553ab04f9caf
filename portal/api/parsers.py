"""The API's JSON parser: DRF's, with nesting too deep for Python's decoder refused as a 400.

Python's ``json`` decoder recurses once per nesting level; a body of a few
thousand ``[`` (well under API_MAX_BODY_BYTES) exhausts the stack and raises
``RecursionError``, which DRF's parser does not catch (a 500).
"""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError


class JSONParser(parsers.JSONParser):
    def parse(self, stream, media_type=None, parser_context=None):  # noqa: ANN001, ANN201 - DRF's signature
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply.") from None

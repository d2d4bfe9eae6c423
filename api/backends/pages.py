"""Continue tokens of the embedded backend's job lists (the Kubernetes backend passes the
API server's own through).

A token is the submission sequence number of the last job of the page, base64url
encoded so clients treat it as opaque; the next page starts after it. Jobs created
or deleted meanwhile never shift a page, as with Kubernetes' continue tokens.
"""

from __future__ import annotations

import base64
import binascii

from ultraplane.api.errors import ApiError

PREFIX = "seq:"


def token_after(seq: int) -> str:
    return base64.urlsafe_b64encode(f"{PREFIX}{seq}".encode()).decode().rstrip("=")


def seq_after(token: str | None) -> int:
    """The sequence number a page starts after; 422 naming `continue` for a bad token."""
    if not token:
        return -1
    try:
        text = base64.urlsafe_b64decode(token + "=" * (-len(token) % 4)).decode()
        if text.startswith(PREFIX) and text[len(PREFIX):].isdigit():
            return int(text[len(PREFIX):])
    except (binascii.Error, UnicodeDecodeError, ValueError):
        pass
    raise ApiError(422, "ValidationError", "continue",
                   "continue: not a token from a previous page of this list")

"""Request bodies read as quota files are: a key given twice in one JSON object is refused (422), not
overwritten by its last value, so ``{"state": "ENABLED", "state": "DISABLED"}`` never applies a change the
sender may not have meant. The routes of a router made with ``route_class=StrictJsonRoute`` read their
bodies so; everything else about reading a body (what FastAPI answers for broken JSON, a number too long
to convert, nesting too deep) is unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine
from typing import Any

from fastapi import HTTPException, Request, Response, status
from fastapi.routing import APIRoute


def _object_without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    mapping: dict[str, Any] = {}
    for key, value in pairs:
        if key in mapping:
            raise HTTPException(
                status.HTTP_422_UNPROCESSABLE_ENTITY,
                f"key {key!r} appears twice in one JSON object of the request body: keep only one",
            )
        mapping[key] = value
    return mapping


class _StrictJsonRequest(Request):
    async def json(self) -> Any:
        if not hasattr(self, "_json"):
            self._json = json.loads(await self.body(), object_pairs_hook=_object_without_duplicates)
        return self._json


class StrictJsonRoute(APIRoute):
    """An ``APIRoute`` whose JSON body refuses a key given twice in one object (FastAPI re-raises an
    ``HTTPException`` met while it reads the body, so the sender gets that 422)."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def strict_handler(request: Request) -> Response:
            return await handler(_StrictJsonRequest(request.scope, request.receive))

        return strict_handler

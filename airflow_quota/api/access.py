"""Who may read and change GPU quotas: Airflow's own pool permission check (``requires_access_pool``).

A quota share is an Airflow pool that can lend and borrow, so the auth manager's pool permissions decide:
reading needs read access to pools (every role, viewers included), changing needs edit access to pools
(``Op`` and ``Admin``). No user (no ``Bearer`` JWT, no session cookie): 401. Refused: 403, saying which
access is missing.
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any, Literal

from airflow.api_fastapi.auth.managers.models.base_user import BaseUser
from airflow.api_fastapi.core_api.security import GetUserDep, requires_access_pool
from fastapi import Depends, HTTPException, Request, status


def pool_access(method: Literal["GET", "PUT"]) -> Callable[[Request, BaseUser], Coroutine[Any, Any, None]]:
    """Airflow's check of ``method`` on pools, its refusal worded for quotas (Airflow's says "Forbidden")."""
    airflow_check = requires_access_pool(method)
    action = "read" if method == "GET" else "change"

    async def check(request: Request, user: GetUserDep) -> None:
        try:
            await airflow_check(request, user)
        except HTTPException as refused:
            if refused.status_code != status.HTTP_403_FORBIDDEN:
                raise
            needed = f"Forbidden: {action} access to pools is needed to {action} GPU quotas"
            raise HTTPException(status.HTTP_403_FORBIDDEN, needed) from None

    return check


#: A route's ``dependencies``: the caller may read GPU quotas, or change them.
MAY_READ = Depends(pool_access("GET"))
MAY_CHANGE = Depends(pool_access("PUT"))

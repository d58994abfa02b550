"""A durable run's lease, renewed while the run lives (a child task of the run).

The lease names the worker holding the run; unrenewed for ``lease_seconds`` it expires
and another worker may claim the run. The renewal also returns a cancellation asked for
through the engine, which aborts the run at once.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING

import trio

from .._core._errors import LeaseLostError

if TYPE_CHECKING:
    from ._driver import DurableDriver

__all__ = ["keep_lease"]

logger = logging.getLogger("operative.durable")


async def keep_lease(driver: DurableDriver, on_lost: Callable[[str], None]) -> None:
    """Renew the lease until the run ends (a child task of the run).

    A cancellation the renewal returns aborts the run at once (see
    :meth:`DurableDriver._cancelled`); renewing goes on, as the run still commits its outcome.
    """
    durable = driver._durable
    interval = durable.lease_seconds / 3
    with driver._renew_scope:
        await driver._started.wait()
        if driver._failed is not None:
            return
        while True:
            await trio.sleep(interval)
            lease = driver._lease
            assert lease is not None
            try:
                driver._lease, cancel = await durable.engine.renew(
                    lease, lease_seconds=durable.lease_seconds
                )
            except LeaseLostError as exc:
                driver._lost = exc
                on_lost(str(exc))
                return
            except Exception:
                # A database hiccup: try again; if it lasts past the lease, another
                # worker takes over and this run's next write fails with LeaseLostError.
                logger.warning("renewing the lease of run %s failed", lease.run_id, exc_info=True)
                continue
            if cancel:
                driver._cancelled(cancel)

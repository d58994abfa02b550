"""A durable run's lease, renewed while the run lives (by the run's writer task).

The lease names the worker holding the run; unrenewed for ``lease_seconds`` it expires
and another worker may claim the run. :class:`~._writer.RunWriter` calls
:func:`renew_lease` every ``lease_seconds / 3`` from the moment the run holds its lease
until the run finishes (no task of its own: the writer task waits for work with a
deadline at the next renewal). The renewal also returns a cancellation asked for
through the engine, which aborts the run at once.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from ._errors import LeaseLostError

if TYPE_CHECKING:
    from ._driver import DurableDriver

__all__ = ["renew_lease"]

logger = logging.getLogger("operative.durable")


async def renew_lease(driver: DurableDriver) -> bool:
    """Renew ``driver``'s lease once; whether to go on renewing.

    A cancellation the renewal returns aborts the run at once (see
    :meth:`DurableDriver._cancelled`); renewing goes on, as the run still commits its
    outcome. A lease taken over aborts the run and ends the renewals. Any other failure
    (a database hiccup) is logged and the next renewal tries again: if it lasts past the
    lease, another worker takes over and this run's next write fails with
    ``LeaseLostError``.
    """
    durable = driver._durable
    lease = driver._lease
    assert lease is not None
    try:
        driver._lease, cancel = await durable.engine.renew(
            lease, lease_seconds=durable.lease_seconds
        )
    except LeaseLostError as exc:
        driver._lost = exc
        abort = driver._abort
        if abort is not None:
            abort(str(exc))
        return False
    except Exception:
        logger.warning("renewing the lease of run %s failed", lease.run_id, exc_info=True)
        return True
    if cancel:
        driver._cancelled(cancel)
    return True

"""``routing``: pick a generate function per request.

A route pairs a generate function with a condition on the request (a predicate, or one
of the helpers :func:`by_model`, :func:`needs_tools`, :func:`fits_tokens`) and, for
cost-based choice, an estimate of what the request would cost on it.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Sequence
from typing import Any, Literal

import attrs
import msgspec

from .._core._errors import InvalidArgument
from .._core._model import GenerateFunction, GenerateRequest, GenerateResponse
from ._errors import NoRouteError
from ._fallover import provider_name

__all__ = [
    "Route",
    "Router",
    "by_model",
    "estimate_tokens",
    "fits_tokens",
    "needs_tools",
    "per_token_cost",
    "routing",
]

ROUTE_KEY = "operative.route"
"""Response metadata key: the name of the route that answered."""

RoutePredicate = Callable[[GenerateRequest], bool]
CostEstimate = Callable[[GenerateRequest], float]


def _check_callable(what: str) -> Callable[[Any, Any, Any], None]:
    def check(instance: Any, attribute: Any, value: Any) -> None:
        if value is not None and not callable(value):
            raise InvalidArgument(f"Route.{what} must be callable, got {value!r}")

    return check


def _check_generate(instance: Any, attribute: Any, value: Any) -> None:
    if not callable(value):
        raise InvalidArgument(f"Route.generate must be a generate function, got {value!r}")


def _check_name(instance: Any, attribute: Any, value: Any) -> None:
    if value is not None and (not isinstance(value, str) or not value):
        raise InvalidArgument(f"Route.name must be a non-empty string or None, got {value!r}")


@attrs.frozen(kw_only=True)
class Route:
    """One way to answer: ``generate``, used for requests ``when`` accepts.

    ``when=None`` accepts every request. ``cost`` estimates what a request would cost on
    this route (any unit, the same for all routes); ``routing(..., prefer="cheapest")``
    needs it. ``name`` (default: the generate function's name) goes into the answer's
    ``metadata["operative.route"]``.
    """

    generate: GenerateFunction = attrs.field(validator=_check_generate)
    when: RoutePredicate | None = attrs.field(default=None, validator=_check_callable("when"))
    cost: CostEstimate | None = attrs.field(default=None, validator=_check_callable("cost"))
    name: str | None = attrs.field(default=None, validator=_check_name)


def by_model(*prefixes: str, key: str = "model") -> RoutePredicate:
    """Requests whose ``settings[key]`` starts with one of ``prefixes``."""
    if not prefixes or not all(isinstance(p, str) and p for p in prefixes):
        raise InvalidArgument(f"by_model() takes one or more non-empty prefixes, got {prefixes!r}")

    def matches(request: GenerateRequest) -> bool:
        model = request.settings.get(key)
        return isinstance(model, str) and model.startswith(prefixes)

    matches.__qualname__ = f"by_model{prefixes!r}"
    return matches


def needs_tools(required: bool = True) -> RoutePredicate:
    """Requests that offer the model tools (or, with ``required=False``, offer none)."""

    def matches(request: GenerateRequest) -> bool:
        return bool(request.tools) is required

    matches.__qualname__ = f"needs_tools({required!r})"
    return matches


def estimate_tokens(request: GenerateRequest) -> int:
    """A rough prompt size in tokens: about four characters per token.

    Counts message text, tool call arguments and the tool specs; good enough to choose a
    route, not to bill. Pass your own tokenizer-backed estimate for better numbers.
    """
    characters = 0
    for message in request.conversation.messages:
        content = message.content
        if isinstance(content, str):
            characters += len(content)
        else:
            for part in content:
                text = getattr(part, "text", None)
                characters += len(text) if isinstance(text, str) else 1000
        for call in message.tool_calls or ():
            arguments = call.arguments
            characters += len(call.name) + len(
                arguments if isinstance(arguments, str) else json.dumps(arguments)
            )
    for spec in request.tools:
        characters += len(spec.name) + len(spec.description) + len(json.dumps(spec.input_schema))
    return math.ceil(characters / 4)


def fits_tokens(
    maximum: int, *, estimate: Callable[[GenerateRequest], float] = estimate_tokens
) -> RoutePredicate:
    """Requests whose estimated prompt is at most ``maximum`` tokens."""
    if isinstance(maximum, bool) or not isinstance(maximum, int) or maximum < 1:
        raise InvalidArgument(f"fits_tokens() takes a token count >= 1, got {maximum!r}")

    def matches(request: GenerateRequest) -> bool:
        return estimate(request) <= maximum

    matches.__qualname__ = f"fits_tokens({maximum!r})"
    return matches


def per_token_cost(
    usd_per_million: float, *, estimate: Callable[[GenerateRequest], float] = estimate_tokens
) -> CostEstimate:
    """A ``Route.cost``: the estimated prompt tokens times a price per million tokens."""
    if (
        isinstance(usd_per_million, bool)
        or not isinstance(usd_per_million, int | float)
        or not usd_per_million >= 0
    ):
        raise InvalidArgument(f"per_token_cost() takes a price >= 0, got {usd_per_million!r}")

    def cost(request: GenerateRequest) -> float:
        return estimate(request) * usd_per_million / 1_000_000

    cost.__qualname__ = f"per_token_cost({usd_per_million!r})"
    return cost


class Router:
    """A ``GenerateFunction`` that routes each request; see :func:`routing`."""

    def __init__(
        self,
        routes: tuple[tuple[str, Route], ...],
        *,
        default: tuple[str, GenerateFunction] | None,
        prefer: Literal["first", "cheapest"],
        max_cost: float | None,
    ) -> None:
        self.routes = routes
        self.default = default
        self.prefer = prefer
        self.max_cost = max_cost
        self.name = f"routing({', '.join(name for name, _ in routes)})"
        """How outer routes and fallovers name this one."""

    def __repr__(self) -> str:
        names = [name for name, _ in self.routes]
        return f"routing({names!r}, prefer={self.prefer!r})"

    def choose(self, request: GenerateRequest) -> tuple[str, GenerateFunction]:
        """The route ``request`` goes to: ``(name, generate)``.

        Raises:
            NoRouteError: no route accepts the request and there is no default.
        """
        matching = [
            (name, route)
            for name, route in self.routes
            if route.when is None or route.when(request)
        ]
        if self.prefer == "cheapest":
            best: tuple[float, str, Route] | None = None
            for name, route in matching:
                assert route.cost is not None
                cost = float(route.cost(request))
                if self.max_cost is not None and cost > self.max_cost:
                    continue
                if best is None or cost < best[0]:
                    best = (cost, name, route)
            if best is not None:
                return best[1], best[2].generate
        elif matching:
            name, route = matching[0]
            return name, route.generate
        if self.default is not None:
            return self.default
        names = [name for name, _ in self.routes]
        within = f" within max_cost={self.max_cost!r}" if self.max_cost is not None else ""
        model = request.settings.get("model")
        raise NoRouteError(
            f"no route{within} accepts this request (model={model!r}, "
            f"{len(request.tools)} tools; routes: {', '.join(names)}); add a route that "
            "matches it or give routing(..., default=...)",
            routes=names,
        )

    async def __call__(self, request: GenerateRequest) -> GenerateResponse:
        name, generate = self.choose(request)
        response = await generate(request)
        answer: object = response
        if not isinstance(answer, GenerateResponse):
            return response  # the loop reports the bad value as an InvalidResponseError
        return msgspec.structs.replace(response, metadata={**response.metadata, ROUTE_KEY: name})


def routing(
    routes: Sequence[Route],
    *,
    default: GenerateFunction | None = None,
    prefer: Literal["first", "cheapest"] = "first",
    max_cost: float | None = None,
) -> Router:
    """A generate function that sends each request to the route that fits it.

    With ``prefer="first"`` the first route whose ``when`` accepts the request answers.
    With ``prefer="cheapest"`` every accepting route's ``cost`` is estimated and the
    cheapest one at most ``max_cost`` answers (ties go to the earlier route). When no
    route fits, ``default`` answers (its route name is ``"default"``), or the call
    raises :class:`~operative.providers.NoRouteError`. The answer's
    ``metadata["operative.route"]`` names the route that gave it.

    Raises:
        InvalidArgument: a route is not a :class:`Route`, two routes share a name,
            ``prefer="cheapest"`` with a route that has no ``cost``, or ``max_cost``
            without ``prefer="cheapest"``.
    """
    given: object = routes
    if isinstance(given, str | bytes) or not isinstance(given, Sequence):
        raise InvalidArgument(f"routing() takes a list of Route, got {given!r}")
    if prefer not in ("first", "cheapest"):
        raise InvalidArgument(f"prefer must be 'first' or 'cheapest', got {prefer!r}")
    if max_cost is not None:
        if prefer != "cheapest":
            raise InvalidArgument("max_cost applies only with prefer='cheapest'")
        if isinstance(max_cost, bool) or not isinstance(max_cost, int | float) or max_cost < 0:
            raise InvalidArgument(f"max_cost must be a number >= 0 or None, got {max_cost!r}")
    if default is not None and not callable(default):
        raise InvalidArgument(f"default must be a generate function, got {default!r}")
    if not routes and default is None:
        raise InvalidArgument("routing() needs at least one route or a default")
    named: list[tuple[str, Route]] = []
    explicit: set[str] = set()
    for index, route in enumerate(routes):
        if not isinstance(route, Route):
            raise InvalidArgument(
                f"routing() routes must be Route(...), got {route!r} at position {index}"
            )
        if prefer == "cheapest" and route.cost is None:
            raise InvalidArgument(
                f"route {index} has no cost estimate; prefer='cheapest' needs Route(cost=...) "
                "on every route (see per_token_cost())"
            )
        if route.name is not None:
            if route.name in explicit or route.name == "default":
                raise InvalidArgument(f"two routes are named {route.name!r}; names must differ")
            explicit.add(route.name)
    taken = set(explicit)
    for index, route in enumerate(routes):
        name = route.name
        if name is None:
            name = provider_name(route.generate)
            if name in taken:
                name = f"{name}#{index + 1}"
            taken.add(name)
        named.append((name, route))
    return Router(
        tuple(named),
        default=None if default is None else ("default", default),
        prefer=prefer,
        max_cost=None if max_cost is None else float(max_cost),
    )

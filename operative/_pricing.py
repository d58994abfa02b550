"""List prices per model, and what a :class:`~operative.Usage` cost.

Prices are USD per million tokens. The cost of a usage record is::

    prompt      * input_per_mtok
  + completion  * output_per_mtok
  + cache_read  * cache_read_per_mtok
  + cache_write * cache_write_per_mtok

which relies on one convention for :class:`~operative.Usage`, the one every operative
adapter follows: ``prompt`` counts *uncached* input tokens only; ``cache_read`` and
``cache_write`` count the cached ones separately; ``completion`` includes reasoning
tokens (``reasoning`` is a breakdown of it, never added on top). Anthropic reports
usage that way already; OpenAI and Gemini include cached tokens in their prompt counts,
so their adapters subtract them. A ``generate`` function written by hand must do the
same, or cached tokens are priced twice.

A model the table does not know has no cost: :func:`cost_of` returns ``None`` and never
guesses from a similar name.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping

import msgspec

from ._core._errors import InvalidArgument
from ._core._types import Usage

__all__ = ["DEFAULT_PRICES", "ModelPrice", "PriceTable", "cost_of"]

_MILLION = 1_000_000


class ModelPrice(msgspec.Struct, frozen=True, kw_only=True):
    """One model's list prices, in USD per million tokens."""

    input_per_mtok: float
    """Uncached input (prompt) tokens."""
    output_per_mtok: float
    """Output tokens, reasoning included."""
    cache_read_per_mtok: float | None = None
    """Input tokens served from the prompt cache; ``None`` means the input price."""
    cache_write_per_mtok: float | None = None
    """Input tokens written to the prompt cache; ``None`` means the input price (providers
    that do not charge extra for writes)."""

    def __post_init__(self) -> None:
        for name in self.__struct_fields__:
            value = getattr(self, name)
            if value is not None and not value >= 0:
                raise InvalidArgument(f"ModelPrice.{name} must be >= 0, not {value!r}")

    def cost(self, usage: Usage) -> float:
        """What ``usage`` cost at these prices, in USD."""
        read = self.input_per_mtok if self.cache_read_per_mtok is None else self.cache_read_per_mtok
        write = (
            self.input_per_mtok if self.cache_write_per_mtok is None else self.cache_write_per_mtok
        )
        return (
            usage.prompt * self.input_per_mtok
            + usage.completion * self.output_per_mtok
            + usage.cache_read * read
            + usage.cache_write * write
        ) / _MILLION


# What may follow a table key for the key to still apply: dated or numbered snapshots
# ("-20250929", "-2024-08-06", "-001"), "-latest", a Vertex "@version", a Bedrock
# "-v1:0". Anything else ("-mini", "-1", ".1", "-preview-05-20") is another model.
_SNAPSHOT = re.compile(r"(?:-\d{4}-\d{2}-\d{2}|-\d{8}|-\d{3,}|-latest|-v\d+(?::\d+)?|@[\w.:-]+)+")


def _normalise(model: str) -> str:
    name = model.strip().lower()
    name = name.rpartition("/")[2]  # "models/gemini-2.5-pro", "openai/gpt-4o"
    if "anthropic." in name:  # Bedrock: "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
        name = name.partition("anthropic.")[2]
    return name


class PriceTable:
    """Model names to :class:`ModelPrice`; immutable, cheap to extend.

    ``lookup`` tries the exact name first, then the longest key the name starts with
    when what follows is only a snapshot suffix: ``"claude-sonnet-4-5-20250929"`` and
    ``"claude-sonnet-4-5@20250929"`` find ``"claude-sonnet-4-5"``, but
    ``"claude-opus-4-8"`` does not fall back to ``"claude-opus-4"`` (a different model
    at a different price) and ``"gpt-4.1-nano"`` does not fall back to ``"gpt-4.1"``.
    Names are compared lower-cased, after any ``"provider/"`` or ``"models/"`` prefix.

    Build your own with ``PriceTable({"my-model": ModelPrice(...)})`` or extend the
    defaults with ``DEFAULT_PRICES.with_prices({...})`` (your prices win).
    """

    __slots__ = ("_prices",)

    def __init__(self, prices: Mapping[str, ModelPrice] | None = None) -> None:
        table: dict[str, ModelPrice] = {}
        for name, price in (prices or {}).items():
            if not isinstance(price, ModelPrice):
                raise InvalidArgument(
                    f"PriceTable values must be ModelPrice, not {type(price).__name__} "
                    f"(for {name!r})"
                )
            table[_normalise(name)] = price
        self._prices = table

    def with_prices(self, prices: Mapping[str, ModelPrice]) -> PriceTable:
        """A new table: these prices added to (or replacing) this table's."""
        merged = PriceTable(prices)
        merged._prices = {**self._prices, **merged._prices}
        return merged

    def lookup(self, model: str) -> ModelPrice | None:
        """The price of ``model``, or ``None`` when the table does not know it."""
        name = _normalise(model)
        price = self._prices.get(name)
        if price is not None:
            return price
        best = ""
        for key in self._prices:
            if (
                len(key) > len(best)
                and name.startswith(key)
                and _SNAPSHOT.fullmatch(name, len(key)) is not None
            ):
                best = key
        return self._prices[best] if best else None

    def cost_of(self, usage: Usage, model: str) -> float | None:
        """What ``usage`` cost on ``model`` in USD, or ``None`` for an unknown model."""
        price = self.lookup(model)
        return None if price is None else price.cost(usage)

    def __contains__(self, model: object) -> bool:
        return isinstance(model, str) and self.lookup(model) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self._prices)

    def __len__(self) -> int:
        return len(self._prices)

    def __repr__(self) -> str:
        return f"PriceTable(<{len(self._prices)} models>)"


def cost_of(usage: Usage, model: str, prices: PriceTable | None = None) -> float | None:
    """What ``usage`` cost on ``model`` in USD; ``None`` when the model has no price.

    ``prices`` defaults to :data:`DEFAULT_PRICES`.
    """
    return (DEFAULT_PRICES if prices is None else prices).cost_of(usage, model)


def _p(inp: float, out: float, read: float | None = None, write: float | None = None) -> ModelPrice:
    return ModelPrice(
        input_per_mtok=inp,
        output_per_mtok=out,
        cache_read_per_mtok=read,
        cache_write_per_mtok=write,
    )


# ---------------------------------------------------------------------------------------
# List prices, standard tier, USD per million tokens. Looked up on 2026-11-29 from the
# vendors' pricing pages (and, where noted, from model pages and secondary copies of
# them). Prices change: check them against the vendor's page before relying on them for
# billing, and override with DEFAULT_PRICES.with_prices({...}).
#
# Not modelled: batch, flex and priority tiers; long-context surcharges (Gemini 2.5 Pro
# above 200k prompt tokens costs more; the table holds the <=200k price, so long prompts
# are under-counted); Anthropic's 1-hour cache writes (Usage does not say which TTL was
# written; the 5-minute price is used); Gemini's cache storage per hour; audio tokens.
# ---------------------------------------------------------------------------------------

_ANTHROPIC = {
    # platform.claude.com/docs/en/about-claude/pricing, "Model pricing": base input,
    # 5-minute cache writes, cache hits, output. Confirmed there for every row below.
    "claude-opus-4-8": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-7": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-6": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-5": _p(5.0, 25.0, 0.50, 6.25),
    "claude-opus-4-1": _p(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4": _p(15.0, 75.0, 1.50, 18.75),
    "claude-opus-4-0": _p(15.0, 75.0, 1.50, 18.75),
    "claude-sonnet-4-6": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-5": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4": _p(3.0, 15.0, 0.30, 3.75),
    "claude-sonnet-4-0": _p(3.0, 15.0, 0.30, 3.75),
    "claude-3-7-sonnet": _p(3.0, 15.0, 0.30, 3.75),
    "claude-3-5-sonnet": _p(3.0, 15.0, 0.30, 3.75),
    "claude-haiku-4-5": _p(1.0, 5.0, 0.10, 1.25),
    "claude-3-5-haiku": _p(0.80, 4.0, 0.08, 1.0),
    "claude-3-opus": _p(15.0, 75.0, 1.50, 18.75),
    "claude-3-haiku": _p(0.25, 1.25, 0.03, 0.30),
    # Claude 5 generation, same page (Opus 5) and the Sonnet 5 model page.
    "claude-opus-5": _p(5.0, 25.0, 0.50, 6.25),
    "claude-sonnet-5": _p(2.0, 10.0, 0.20, 2.50),
    # Not listed, unconfirmed: Sonnet 5.5, Opus 5.5, Haiku 5.5 (prompt-length price
    # tiers), Fable/Mythos 5.x. Add them with with_prices() once checked.
}

_OPENAI = {
    # developers.openai.com/api/docs/pricing and the model pages ("Text tokens"):
    # input, cached input, output. OpenAI does not charge extra for cache writes.
    "gpt-5": _p(1.25, 10.0, 0.125),
    "gpt-5-mini": _p(0.25, 2.0, 0.025),
    "gpt-5-nano": _p(0.05, 0.40, 0.005),
    "gpt-4.1": _p(2.0, 8.0, 0.50),
    "gpt-4.1-mini": _p(0.40, 1.60, 0.10),
    "gpt-4.1-nano": _p(0.10, 0.40, 0.025),
    "gpt-4o": _p(2.50, 10.0, 1.25),
    "gpt-4o-mini": _p(0.15, 0.60, 0.075),
    "o3": _p(2.0, 8.0, 0.50),
    "o4-mini": _p(1.10, 4.40, 0.275),
    # o3-mini and o1: input and output confirmed; cached-input prices only from
    # secondary copies of the page.
    "o3-mini": _p(1.10, 4.40, 0.55),
    "o1": _p(15.0, 60.0, 7.50),
    # Not listed, unconfirmed on the vendor's own page: gpt-5.x point releases and
    # the later families (their prices differ from gpt-5's), o3-pro, o1-pro.
}

_GEMINI = {
    # ai.google.dev/gemini-api/docs/pricing, paid tier, text input: input, output,
    # context-cache reads. Input and output prices were confirmed; the cache-read
    # prices could only be confirmed from secondary copies of the page (which
    # disagree for older snapshots) and should be checked. Gemini bills cache storage
    # per hour instead of a write premium, so writes are priced as input.
    "gemini-2.5-pro": _p(1.25, 10.0, 0.125),  # prompts <= 200k tokens
    "gemini-2.5-flash": _p(0.30, 2.50, 0.03),
    "gemini-2.5-flash-lite": _p(0.10, 0.40, 0.01),
    "gemini-2.0-flash": _p(0.10, 0.40, 0.025),
    # Not listed, unconfirmed: gemini-2.0-flash-lite, the 3.x previews.
}

DEFAULT_PRICES = PriceTable({**_ANTHROPIC, **_OPENAI, **_GEMINI})
"""The list prices operative ships with (see the comment above the table in the source
for the date they were looked up, and what is not modelled)."""

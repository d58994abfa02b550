"""What a 401 or 403 says about the API key: only a request that carried none is told to
set the environment variable; a key that was sent is reported as rejected."""

from __future__ import annotations

import pytest

from operative.providers import ProviderAuthenticationError
from operative.providers._errors import status_error


def _auth_error(
    status: int = 401, *, key_sent: bool | None = None, key_source: str | None = None
) -> str:
    error = status_error(
        provider="acme",
        model="m",
        status=status,
        message="bad key",
        headers={},
        request_id="req_1",
        key_variable="ACME_API_KEY",
        key_sent=key_sent,
        key_source=key_source,
    )
    assert isinstance(error, ProviderAuthenticationError)
    assert not error.retryable
    text = str(error)
    assert f"{status}: bad key" in text
    assert "[request id req_1]" in text
    return text


def test_a_request_without_a_key_is_told_to_set_the_variable() -> None:
    """key_sent=False: the server wants a key and got none, so set the variable."""
    text = _auth_error(key_sent=False)
    assert "the request carried none" in text
    assert "set the ACME_API_KEY environment variable" in text


def test_a_sent_key_is_reported_as_rejected_with_its_source() -> None:
    """key_sent=True: the key is named by where it came from and went, not re-advised."""
    text = _auth_error(key_sent=True, key_source="the api_key= argument, sent in the x-api-key")
    assert "rejected the API key from the api_key= argument, sent in the x-api-key" in text
    assert "set the ACME_API_KEY" not in text
    forbidden = _auth_error(403, key_sent=True, key_source="ACME_API_KEY")
    assert "denied access with the API key from ACME_API_KEY" in forbidden
    assert "set the ACME_API_KEY" not in forbidden


def test_unknown_key_with_the_variable_set_says_it_is_set(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An adapter that cannot tell: with the variable set, the message says so and does
    not tell the user to set it."""
    monkeypatch.setenv("ACME_API_KEY", "k")
    text = _auth_error()
    assert "ACME_API_KEY is set" in text
    assert "set the ACME_API_KEY" not in text


def test_unknown_key_without_the_variable_offers_both(monkeypatch: pytest.MonkeyPatch) -> None:
    """An adapter that cannot tell, the variable unset: check the key given, or set it."""
    monkeypatch.delenv("ACME_API_KEY", raising=False)
    text = _auth_error()
    assert "ACME_API_KEY is not set: check the key given as api_key=" in text
    assert "set the ACME_API_KEY environment variable" in text


def test_a_compound_variable_name_is_read_variable_by_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A key_variable such as "GEMINI_API_KEY (or GOOGLE_API_KEY)": the one that is set."""
    monkeypatch.delenv("GEMINI_API_KEY", raising=False)
    monkeypatch.setenv("GOOGLE_API_KEY", "k")
    error = status_error(
        provider="gemini",
        model="m",
        status=401,
        message="no",
        headers={},
        request_id=None,
        key_variable="GEMINI_API_KEY (or GOOGLE_API_KEY)",
    )
    assert "GOOGLE_API_KEY is set" in str(error)

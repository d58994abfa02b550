"""A chat session kept in a SQLite file: run it twice and the conversation continues.

Runs offline: the model is a scripted stand-in (labelled as such) that remembers what
it was told earlier in the session, which it can only do because the session's
transcript was stored and loaded again. Swap ``generate=`` for a real provider.

    python examples/chat_session.py "My name is Ada."
    python examples/chat_session.py "What is my name?"

The session is kept in ``chat_session.db`` in the ``operative`` command's data
directory (``$OPERATIVE_DATA_DIR``, else ``$XDG_DATA_HOME/operative``, else
``~/.local/share/operative``), not in the working directory; name another file first
(``python examples/chat_session.py my-chat.db "Hello"``) to keep it there. Without
arguments it plays both invocations against a file in a temporary directory.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import trio

from operative import GenerateRequest, GenerateResponse, create_agent
from operative.kvstore import SqliteStore
from operative.sessions import create_session_store, open_session


async def remembering_model(request: GenerateRequest) -> GenerateResponse:
    """A stand-in model (scripted, offline): answers from what the transcript holds."""
    said = [m.text for m in request.conversation.messages if m.role == "user"]
    names = [text.removeprefix("My name is ").rstrip(".") for text in said if "name is" in text]
    if said[-1].startswith("What is my name") and names:
        answer = f"Your name is {names[-1]}."
    else:
        answer = f"Noted. (message {len(said)} of this session)"
    return GenerateResponse(content=f"[scripted model] {answer}")


def data_directory() -> Path:
    """Where the ``operative`` command keeps its data (see its ``--data-dir``)."""
    if os.environ.get("OPERATIVE_DATA_DIR"):
        return Path(os.environ["OPERATIVE_DATA_DIR"])
    base = os.environ.get("XDG_DATA_HOME") or Path.home() / ".local" / "share"
    return Path(base) / "operative"


async def main(path: str, message: str) -> None:
    agent = create_agent(
        generate=remembering_model, name="chat", instructions="You are a helpful assistant."
    )
    async with SqliteStore(path) as kv:
        sessions = create_session_store(kv)
        async with open_session("chat-1", store=sessions, agent=agent) as chat:
            result = await chat.run(message)
        print(result.content)
        session = chat.session
        print(f"{len(session.runs)} runs, {len(session.conversation_history.messages)} messages")
        print("last outcome:", session.runs[-1].outcome)


if __name__ == "__main__":
    if len(sys.argv) > 2:  # a database file, then the message
        trio.run(main, sys.argv[1], sys.argv[2])
    elif len(sys.argv) == 2:  # the message; the session lives in the data directory
        database = data_directory() / "chat_session.db"
        database.parent.mkdir(parents=True, exist_ok=True)
        trio.run(main, str(database), sys.argv[1])
        print(f"(the session is kept in {database})")
    else:
        with tempfile.TemporaryDirectory() as directory:
            scratch = str(Path(directory) / "chat.db")
            trio.run(main, scratch, "My name is Ada.")
            trio.run(main, scratch, "What is my name?")

"""A chat session kept in a SQLite file: run it twice and the conversation continues.

Runs offline: the model is a scripted stand-in (labelled as such) that remembers what
it was told earlier in the session, which it can only do because the session's
transcript was stored and loaded again. Swap ``generate=`` for a real provider.

    python examples/chat_session.py chat.db "My name is Ada."
    python examples/chat_session.py chat.db "What is my name?"

Without arguments it plays both invocations against a file in a temporary directory.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import trio

from operative import GenerateRequest, GenerateResponse, create_agent
from operative.sessions import create_session_store, open_session
from operative.storage import SqliteStore


async def remembering_model(request: GenerateRequest) -> GenerateResponse:
    """A stand-in model (scripted, offline): answers from what the transcript holds."""
    said = [m.text for m in request.conversation.messages if m.role == "user"]
    names = [text.removeprefix("My name is ").rstrip(".") for text in said if "name is" in text]
    if said[-1].startswith("What is my name") and names:
        answer = f"Your name is {names[-1]}."
    else:
        answer = f"Noted. (message {len(said)} of this session)"
    return GenerateResponse(content=f"[scripted model] {answer}")


async def main(path: str, message: str) -> None:
    agent = create_agent(
        generate=remembering_model, name="chat", instructions="You are a helpful assistant."
    )
    async with SqliteStore(path) as kv:
        sessions = create_session_store(kv)
        async with open_session("chat-1", store=sessions, agent_name="chat", agent=agent) as chat:
            result = await chat.run(message)
        print(result.content)
        session = chat.session
        print(f"{len(session.runs)} runs, {len(session.conversation_history.messages)} messages")
        print("last outcome:", session.runs[-1].outcome)


if __name__ == "__main__":
    if len(sys.argv) > 1:
        trio.run(main, sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "Hello!")
    else:
        with tempfile.TemporaryDirectory() as directory:
            database = str(Path(directory) / "chat.db")
            trio.run(main, database, "My name is Ada.")
            trio.run(main, database, "What is my name?")

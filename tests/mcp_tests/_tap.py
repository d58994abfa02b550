"""A transparent relay in front of a stdio server, recording what the client sends.

``python _tap.py LOG -- command args...`` starts the server, copies this process's stdin
to the server's stdin (appending every line to LOG) and the server's stdout to this
process's stdout, untouched. When the client closes stdin, the server's stdin is closed
and the relay exits with the server's exit code. It lets a test see what went over the
wire (a ``notifications/cancelled``) to a real server.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main() -> int:
    log_path, separator, *command = sys.argv[1:]
    assert separator == "--", "usage: _tap.py LOG -- command args..."
    server = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    assert server.stdin is not None
    assert server.stdout is not None
    upstream = server.stdout

    def relay_out() -> None:
        while chunk := os.read(upstream.fileno(), 65536):
            sys.stdout.buffer.write(chunk)
            sys.stdout.buffer.flush()

    out = threading.Thread(target=relay_out, daemon=True)
    out.start()
    with open(log_path, "ab") as log:
        for line in sys.stdin.buffer:
            log.write(line)
            log.flush()
            server.stdin.write(line)
            server.stdin.flush()
    server.stdin.close()
    code = server.wait()
    out.join(timeout=5)
    return code


if __name__ == "__main__":
    sys.exit(main())

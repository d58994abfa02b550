"""Measure what slow and non-reading HTTP clients hold in ``operative serve``, on real sockets.

The server is ``python -m operative serve --offline --port 0`` of the source tree given with
``--checkout`` (``PYTHONPATH=CHECKOUT``, this interpreter, a temporary working and data
directory, no OpenAI/Anthropic/operative variables in its environment, its soft
``RLIMIT_NOFILE`` raised to the hard limit), a fresh process for each of two phases:

1. **Non-reading clients** (``--non-reading``, 30). After one small warm-up turn, the
   server's baseline RSS (``VmRSS`` of ``/proc/PID/status``) and open descriptors
   (``/proc/PID/fd``). Then N clients each set ``SO_RCVBUF`` to 4 KiB, connect, send
   ``POST /api/turn`` with a JSON body of about 3.5 MB (``{"message": "..."}``, under the
   4 MiB cap; the offline model echoes the message in its answer, so each answer is a
   stream of several times that) and never read. Every second for 60 s: the server's RSS,
   its descriptors, the bytes waiting in its sockets' send queues and in the clients'
   receive queues (``/proc/net/tcp``), and the kernel's TCP memory (``/proc/net/sockstat``,
   machine-wide). Reported: peak RSS above baseline, RSS above baseline at 10 s and at
   60 s, descriptors at the same points, and when descriptors were back at the baseline.
   After the window, what each client can read (its status line, up to 64 KiB, and
   whether the connection is still open, ended or reset), then the clients close and the
   server is sampled until its descriptors are back (at most 10 s).
2. **Trickling bodies** (``--trickling``, 500). N clients, driven by trio in this one
   process and connecting 50 every 0.1 s (``--ramp``; 500 at once overflow hypercorn's
   listen backlog of 100, and the kernel reset 60 to 190 of them here, before and after
   alike), each send the headers of ``POST /api/turn`` with ``Content-Length: 100000``
   and then one byte of the body every second, reading whatever comes back. Every second
   for 60 s: the server's descriptors (and RSS). Reported: the peak, when descriptors were
   back at the baseline, and how many clients got a ``408`` (any other status is counted
   by code), were cut (reset, or closed without an answer), or were still sending at 60 s.

Both phases also count the server's own request log lines by status (``POST /api/turn
408``; ``-`` when the client left before an answer began), where the checkout writes one.
``--words`` makes the non-reading clients' message words (the offline model then streams
its answer a word at a time) instead of one 3.5 MB word. The JSON keeps every sample; its
keys named ``60s`` hold the window's last sample (``window_s``: 60 unless ``--window``
says otherwise).

Run: ``python benchmarks/bench_edge.py --checkout PATH [--label NAME] [--non-reading 30]
[--trickling 500] [--json OUT]``; a little over 2 minutes with the default window.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import resource
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import trio

sys.path.insert(0, str(Path(__file__).resolve().parent))

from _common import machine, print_table, write_json

WINDOW = 60
"""Seconds each phase is watched for (the point of the benchmark: keep it)."""
MESSAGE_BYTES = 3_500_000
"""The non-reading clients' message: close to the 4 MiB body cap with its JSON around it."""
SMALL_RCVBUF = 4096
"""The non-reading clients' ``SO_RCVBUF`` (the kernel doubles it)."""
TRICKLE_LENGTH = 100_000
"""The ``Content-Length`` the trickling clients announce (and never reach)."""
AFTER_CLOSE_SECONDS = 10
"""How long the server is watched after the clients close, for its descriptors to return."""
SERVING = re.compile(r"serving the chat page at http://127\.0\.0\.1:(\d+)/")
REQUEST_LOG = re.compile(r"\b(GET|POST|PUT|PATCH|DELETE|HEAD) (\S+) (\d{3}|-) ")


# --- the server ---------------------------------------------------------------------------


def _raise_nofile() -> None:
    """``preexec_fn`` (and this process): the soft descriptor limit up to the hard one."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))


def _server_env(checkout: Path) -> dict[str, str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("OPENAI", "ANTHROPIC", "OPERATIVE_"))
    }
    env["PYTHONPATH"] = str(checkout)
    return env


def _checkout_facts(checkout: Path, python: str) -> dict[str, Any]:
    """The checkout's commit, whether its ``operative/`` differs from it, and which
    ``operative`` the server's interpreter imports with its ``PYTHONPATH``."""
    facts: dict[str, Any] = {"path": str(checkout)}

    def git(*args: str) -> str:
        done = subprocess.run(
            ["git", "-C", str(checkout), *args], capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    facts["commit"] = git("rev-parse", "HEAD") or None
    changed = git("status", "--porcelain", "--", "operative")
    facts["operative_files_changed_from_commit"] = len(changed.splitlines()) if changed else 0
    with tempfile.TemporaryDirectory() as where:
        done = subprocess.run(
            [python, "-c", "import operative; print(operative.__file__)"],
            capture_output=True,
            text=True,
            cwd=where,
            env=_server_env(checkout),
            check=False,
        )
    facts["imports_operative_from"] = done.stdout.strip() or done.stderr.strip()[-300:]
    return facts


class Server:
    """One ``operative serve --offline --port 0`` process of the checkout."""

    def __init__(self, python: str, checkout: Path) -> None:
        self.python = python
        self.checkout = checkout
        self.root = Path(tempfile.mkdtemp(prefix="bench-edge-"))
        self.log_path = self.root / "server.log"
        self.process: subprocess.Popen[bytes] | None = None
        self.port = 0
        self.stopped = ""

    def start(self) -> None:
        with open(self.log_path, "wb") as log:
            self.process = subprocess.Popen(
                [
                    self.python,
                    "-m",
                    "operative",
                    "serve",
                    "--offline",
                    "--port",
                    "0",
                    "--data-dir",
                    str(self.root / "data"),
                ],
                cwd=self.root,
                env=_server_env(self.checkout),
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                preexec_fn=_raise_nofile,
                start_new_session=True,
            )
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            match = SERVING.search(self.log())
            if match:
                self.port = int(match.group(1))
                return
            if self.process.poll() is not None:
                break
            time.sleep(0.1)
        raise RuntimeError(f"the server did not start; its output:\n{self.log()[-3000:]}")

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""

    def statuses(self) -> dict[str, int]:
        """The server's request log lines, counted as ``"POST /api/turn 408"``."""
        found = collections.Counter(
            f"{m.group(1)} {m.group(2)} {m.group(3)}" for m in REQUEST_LOG.finditer(self.log())
        )
        return dict(sorted(found.items()))

    def nofile_limit(self) -> str:
        try:
            for line in Path(f"/proc/{self.pid}/limits").read_text().splitlines():
                if line.startswith("Max open files"):
                    soft, hard = line.split()[3:5]
                    return f"{soft}/{hard}"
        except OSError:
            pass
        return "?"

    def stop(self) -> None:
        """Ctrl-C (SIGINT), then SIGKILL after 15 s; the temporary directory goes."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGINT)
            try:
                self.process.wait(15)
                self.stopped = "SIGINT"
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
                self.stopped = "SIGKILL after SIGINT and 15 s"
        shutil.rmtree(self.root, ignore_errors=True)


# --- readings -----------------------------------------------------------------------------


def _status_kib(pid: int) -> dict[str, int]:
    found: dict[str, int] = {}
    try:
        with open(f"/proc/{pid}/status") as status:
            for line in status:
                key, _, rest = line.partition(":")
                if key in ("VmRSS", "VmHWM"):
                    found[key] = int(rest.split()[0])
    except OSError:
        pass
    return found


def _fds(pid: int) -> int:
    try:
        return len(os.listdir(f"/proc/{pid}/fd"))
    except OSError:
        return -1


def _cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return -1.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _tcp_mem_kib() -> int:
    """The kernel's TCP buffer memory, machine-wide (``/proc/net/sockstat``, in pages)."""
    try:
        for line in Path("/proc/net/sockstat").read_text().splitlines():
            if line.startswith("TCP:"):
                parts = line.split()
                return int(parts[parts.index("mem") + 1]) * os.sysconf("SC_PAGE_SIZE") // 1024
    except (OSError, ValueError):
        pass
    return -1


def _queues(port: int) -> dict[str, int]:
    """From ``/proc/net/tcp``: the server's connections on ``port`` (not its listener),
    the bytes in their send and receive queues, and the bytes unread in the clients'."""
    out = {"server_conns": 0, "server_sendq": 0, "server_recvq": 0, "client_recvq": 0}
    try:
        lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    except OSError:
        return out
    for line in lines:
        parts = line.split()
        local, remote, state = parts[1], parts[2], parts[3]
        tx, rx = (int(x, 16) for x in parts[4].split(":"))
        if int(local.rsplit(":", 1)[1], 16) == port and state != "0A":
            out["server_conns"] += 1
            out["server_sendq"] += tx
            out["server_recvq"] += rx
        elif int(remote.rsplit(":", 1)[1], 16) == port:
            out["client_recvq"] += rx
    return out


def sample(pid: int, port: int, at: float) -> dict[str, Any]:
    status = _status_kib(pid)
    return {
        "t": round(at, 2),
        "rss_kib": status.get("VmRSS", -1),
        "hwm_kib": status.get("VmHWM", -1),
        "fds": _fds(pid),
        "cpu_s": round(_cpu_seconds(pid), 2),
        "tcp_mem_kib": _tcp_mem_kib(),
        **_queues(port),
    }


async def sample_window(
    pid: int, port: int, t0: float, seconds: int, into: list[dict[str, Any]]
) -> None:
    """One sample at ``t0``, ``t0 + 1``, ..., ``t0 + seconds``."""
    for k in range(seconds + 1):
        await trio.sleep_until(t0 + k)
        into.append(sample(pid, port, trio.current_time() - t0))


async def sample_until_back(
    pid: int, port: int, baseline_fds: int, t0: float, into: list[dict[str, Any]]
) -> float | None:
    """Sample every second until the descriptors are back at the baseline (at most
    :data:`AFTER_CLOSE_SECONDS`); the seconds it took, or None."""
    start = trio.current_time()
    for k in range(AFTER_CLOSE_SECONDS + 1):
        await trio.sleep_until(start + k)
        reading = sample(pid, port, trio.current_time() - t0)
        into.append(reading)
        if 0 <= reading["fds"] <= baseline_fds:
            return round(trio.current_time() - start, 2)
    return None


def _http_request(port: int, body: bytes) -> bytes:
    """A whole ``POST /api/turn`` exchange, ``Connection: close``: the response bytes."""
    head = (
        f"POST /api/turn HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode()
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(head + body)
        chunks = []
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    return b"".join(chunks)


def baseline(server: Server) -> dict[str, Any]:
    """One small turn (so lazily loaded modules are in), a second's rest, one sample."""
    answer = _http_request(server.port, json.dumps({"message": "warm-up"}).encode())
    if not answer.startswith(b"HTTP/1.1 200") or b"You said" not in answer:
        raise RuntimeError(f"the warm-up turn failed: {answer[:500]!r}")
    time.sleep(1.0)
    reading = sample(server.pid, server.port, 0.0)
    reading.pop("t")
    return reading


def _at(samples: list[dict[str, Any]], second: int) -> dict[str, Any]:
    return min(samples, key=lambda s: abs(s["t"] - second))


def _back_at(samples: list[dict[str, Any]], baseline_fds: int) -> float | None:
    """The first sample time after the peak at which the descriptors are at or below the
    baseline and stay there for the rest of the window; None when they never are."""
    peak = max(range(len(samples)), key=lambda i: samples[i]["fds"])
    if samples[peak]["fds"] <= baseline_fds:
        return None
    for i in range(peak, len(samples)):
        if all(0 <= s["fds"] <= baseline_fds for s in samples[i:]):
            return samples[i]["t"]
    return None


def _mib(kib: float) -> float:
    return round(kib / 1024, 1)


# --- 1. non-reading clients ---------------------------------------------------------------


async def _client_view(sock: trio.socket.SocketType, limit: int = 1 << 16) -> dict[str, Any]:
    """What a client that finally reads finds: the status line, the bytes there (up to
    ``limit``), and whether the connection is still open, ended or reset. It sends
    nothing: a byte after the request would start a pipelined one, which changes what
    the server does."""
    got = bytearray()
    state = "open"
    try:
        while len(got) < limit:
            with trio.move_on_after(0.5) as waited:
                data = await sock.recv(65536)
            if waited.cancelled_caught:
                break
            if not data:
                state = "eof"
                break
            got += data
    except OSError as error:
        state = f"{type(error).__name__}"
    first = bytes(got[: got.find(b"\r\n")]) if b"\r\n" in got else bytes(got[:40])
    return {"status_line": first.decode("latin-1"), "bytes_read": len(got), "state": state}


async def non_reading(server: Server, n: int, words: bool) -> dict[str, Any]:
    base = baseline(server)
    if words:  # the offline model streams its answer word by word
        text = ("lorem " * (MESSAGE_BYTES // 6 + 1))[:MESSAGE_BYTES]
    else:  # one word: the answer streams in one delta
        text = ("abcdefghij" * (MESSAGE_BYTES // 10 + 1))[:MESSAGE_BYTES]
    body = json.dumps({"message": text}).encode()
    head = (
        f"POST /api/turn HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    payload = memoryview(head + body)
    socks: list[trio.socket.SocketType] = []
    sent_at: list[float] = []
    errors: collections.Counter[str] = collections.Counter()
    samples: list[dict[str, Any]] = []
    t0 = trio.current_time()

    async def client() -> None:
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        socks.append(sock)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, SMALL_RCVBUF)
            await sock.connect(("127.0.0.1", server.port))
            offset = 0
            while offset < len(payload):
                offset += await sock.send(payload[offset : offset + (1 << 20)])
            sent_at.append(trio.current_time() - t0)
        except OSError as error:
            errors[type(error).__name__] += 1

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_window, server.pid, server.port, t0, WINDOW, samples)
        for _ in range(n):
            nursery.start_soon(client)
        await trio.sleep_until(t0 + WINDOW + 0.5)
        nursery.cancel_scope.cancel()  # a body still being sent: counted as not sent
    not_sent = n - len(sent_at)
    views = []
    async with trio.open_nursery() as nursery:
        for sock in socks:

            async def view(sock: trio.socket.SocketType = sock) -> None:
                views.append(await _client_view(sock))

            nursery.start_soon(view)
    for sock in socks:
        sock.close()
    after: list[dict[str, Any]] = []
    back_after_close = await sample_until_back(server.pid, server.port, base["fds"], t0, after)

    peak = max(samples, key=lambda s: s["rss_kib"])
    at10, at60 = _at(samples, 10), _at(samples, WINDOW)
    back = _back_at(samples, base["fds"])
    return {
        "clients": n,
        "message_bytes": len(text),
        "message_words": words,
        "body_bytes": len(body),
        "client_so_rcvbuf": SMALL_RCVBUF,
        "baseline": base,
        "bodies_sent": len(sent_at),
        "bodies_not_sent": not_sent,
        "last_body_sent_at_s": round(max(sent_at), 2) if sent_at else None,
        "connect_or_send_errors": dict(errors),
        "summary": {
            "baseline_rss_mib": _mib(base["rss_kib"]),
            "peak_rss_above_baseline_mib": _mib(peak["rss_kib"] - base["rss_kib"]),
            "peak_rss_at_s": peak["t"],
            "hwm_above_baseline_mib": _mib(max(s["hwm_kib"] for s in samples) - base["rss_kib"]),
            "rss_above_baseline_at_10s_mib": _mib(at10["rss_kib"] - base["rss_kib"]),
            "rss_above_baseline_at_60s_mib": _mib(at60["rss_kib"] - base["rss_kib"]),
            "baseline_fds": base["fds"],
            "peak_fds": max(s["fds"] for s in samples),
            "fds_at_10s": at10["fds"],
            "fds_at_60s": at60["fds"],
            "fds_back_at_s": back,
            "fds_back": f"{back:g} s" if back is not None else f"never within {WINDOW} s",
            "peak_server_sendq_mib": _mib(max(s["server_sendq"] for s in samples) / 1024),
            "peak_client_recvq_kib": round(max(s["client_recvq"] for s in samples) / 1024, 1),
            "peak_kernel_tcp_mem_mib": _mib(max(s["tcp_mem_kib"] for s in samples)),
            "server_cpu_s_in_window": round(at60["cpu_s"] - samples[0]["cpu_s"], 2),
            "rss_above_baseline_after_close_mib": _mib(after[-1]["rss_kib"] - base["rss_kib"])
            if after
            else None,
            "fds_back_after_close_s": back_after_close,
            "process_peak_rss_above_baseline_mib": _mib(
                max(s["hwm_kib"] for s in after) - base["rss_kib"]
            )
            if after
            else None,
        },
        "client_view_at_end": {
            "states": dict(collections.Counter(v["state"] for v in views)),
            "status_lines": dict(collections.Counter(v["status_line"] for v in views)),
            "bytes_read_max": max((v["bytes_read"] for v in views), default=0),
        },
        "server_request_log": server.statuses(),
        "samples": samples,
        "after_close": after,
    }


# --- 2. trickling bodies ------------------------------------------------------------------


async def trickling(server: Server, n: int, ramp: int) -> dict[str, Any]:
    base = baseline(server)
    head = (
        f"POST /api/turn HTTP/1.1\r\nHost: 127.0.0.1:{server.port}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {TRICKLE_LENGTH}\r\n\r\n"
    ).encode()
    samples: list[dict[str, Any]] = []
    results: list[dict[str, Any]] = []
    t0 = trio.current_time()
    stop_at = t0 + WINDOW + 0.5  # after the window's last sample

    async def client() -> None:
        result: dict[str, Any] = {"outcome": "open", "bytes_sent": 0}
        results.append(result)
        sock = trio.socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        got = bytearray()
        try:
            await sock.connect(("127.0.0.1", server.port))
            result["connected_at"] = trio.current_time() - t0
            await sock.send(head)
            next_byte = trio.current_time()
            while trio.current_time() < stop_at:
                answered = b"\r\n\r\n" in got
                wake = stop_at if answered else min(next_byte, stop_at)
                with trio.move_on_at(wake):
                    data = await sock.recv(4096)
                    if not data:
                        result["outcome"] = "eof"
                        break
                    if not got:
                        result["answer_at"] = trio.current_time() - t0
                    got += data
                    continue
                if not answered and trio.current_time() < stop_at:
                    await sock.send(b" ")
                    result["bytes_sent"] += 1
                    next_byte += 1
        except OSError as error:
            result["outcome"] = type(error).__name__
            result["cut_at"] = trio.current_time() - t0
        finally:
            sock.close()
        if got.startswith(b"HTTP/"):
            result["status"] = got.split(b" ", 2)[1].decode("latin-1")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sample_window, server.pid, server.port, t0, WINDOW, samples)
        for i in range(n):
            if ramp and i and i % ramp == 0:
                await trio.sleep(0.1)
            nursery.start_soon(client)
    after: list[dict[str, Any]] = []
    back_after_close = await sample_until_back(server.pid, server.port, base["fds"], t0, after)

    outcomes: collections.Counter[str] = collections.Counter()
    for result in results:
        if "status" in result:
            outcomes[result["status"]] += 1
        elif result["outcome"] == "open":
            outcomes["still sending at the end"] += 1
        elif "connected_at" not in result:
            outcomes["connect failed"] += 1
        else:
            outcomes["cut"] += 1
    cut_by = collections.Counter(
        r["outcome"] for r in results if "status" not in r and r["outcome"] != "open"
    )
    answer_times = sorted(r["answer_at"] for r in results if "answer_at" in r)
    cut_times = sorted(r["cut_at"] for r in results if "cut_at" in r and "status" not in r)
    connect_times = sorted(r["connected_at"] for r in results if "connected_at" in r)
    peak = max(samples, key=lambda s: s["fds"])
    back = _back_at(samples, base["fds"])
    at10, at60 = _at(samples, 10), _at(samples, WINDOW)
    return {
        "clients": n,
        "content_length": TRICKLE_LENGTH,
        "connects_per_100ms": ramp or "all at once",
        "baseline": base,
        "summary": {
            "baseline_fds": base["fds"],
            "peak_fds": peak["fds"],
            "peak_fds_at_s": peak["t"],
            "fds_at_10s": at10["fds"],
            "fds_at_60s": at60["fds"],
            "fds_back_at_s": back,
            "fds_back": f"{back:g} s" if back is not None else f"never within {WINDOW} s",
            "got_408": outcomes.get("408", 0),
            "cut": outcomes.get("cut", 0),
            "still_sending_at_60s": outcomes.get("still sending at the end", 0),
            "connect_failed": outcomes.get("connect failed", 0),
            "outcomes": dict(outcomes),
            "last_connected_at_s": round(connect_times[-1], 2) if connect_times else None,
            "first_answer_at_s": round(answer_times[0], 2) if answer_times else None,
            "last_answer_at_s": round(answer_times[-1], 2) if answer_times else None,
            "first_cut_at_s": round(cut_times[0], 2) if cut_times else None,
            "last_cut_at_s": round(cut_times[-1], 2) if cut_times else None,
            "cut_by": dict(cut_by),
            "body_bytes_sent_by_cut_clients": dict(
                collections.Counter(
                    r["bytes_sent"] for r in results if "status" not in r and "cut_at" in r
                )
            ),
            "max_body_bytes_sent": max((r["bytes_sent"] for r in results), default=0),
            "baseline_rss_mib": _mib(base["rss_kib"]),
            "peak_rss_above_baseline_mib": _mib(
                max(s["rss_kib"] for s in samples) - base["rss_kib"]
            ),
            "rss_above_baseline_at_60s_mib": _mib(at60["rss_kib"] - base["rss_kib"]),
            "server_cpu_s_in_window": round(at60["cpu_s"] - samples[0]["cpu_s"], 2),
            "fds_back_after_close_s": back_after_close,
        },
        "server_request_log": server.statuses(),
        "samples": samples,
        "after_close": after,
    }


# --- main ---------------------------------------------------------------------------------


def run_phase(name: str, python: str, checkout: Path, fn: Any, *args: Any) -> dict[str, Any]:
    server = Server(python, checkout)
    server.start()
    try:
        print(f"{name}: server pid {server.pid} on port {server.port}", flush=True)
        result = trio.run(fn, server, *args)
        result["server_nofile_limit"] = server.nofile_limit()
    finally:
        server.stop()
    result["server_stopped_by"] = server.stopped
    return result


def main() -> None:
    global WINDOW
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checkout", required=True, type=Path, help="operative source tree")
    parser.add_argument("--label", help="the run's name in the table and JSON")
    parser.add_argument("--non-reading", type=int, default=30, metavar="N")
    parser.add_argument("--trickling", type=int, default=500, metavar="N")
    parser.add_argument("--json", metavar="OUT")
    parser.add_argument("--python", default=sys.executable, help="the server's interpreter")
    parser.add_argument(
        "--words",
        action="store_true",
        help="the non-reading clients' message as space-separated words (the offline "
        "model then streams one event per word) instead of one long word",
    )
    parser.add_argument(
        "--ramp",
        type=int,
        default=50,
        metavar="K",
        help="trickling clients connect K every 0.1 s (50), so that hypercorn's listen "
        "backlog (100) does not overflow; 0: all at once",
    )
    parser.add_argument(
        "--window", type=int, default=WINDOW, help="seconds each phase is watched (60)"
    )
    args = parser.parse_args()
    WINDOW = args.window
    checkout = args.checkout.resolve()
    label = args.label or checkout.name
    _raise_nofile()
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    facts = _checkout_facts(checkout, args.python)
    if not facts["imports_operative_from"].startswith(str(checkout)):
        raise SystemExit(
            f"with PYTHONPATH={checkout} the interpreter imports operative from "
            f"{facts['imports_operative_from']!r}, not from the checkout"
        )
    print(f"{label}: {checkout} at {facts['commit']}", flush=True)
    results: dict[str, Any] = {
        "label": label,
        "checkout": facts,
        "machine": machine(),
        "window_s": WINDOW,
        "driver_nofile_limit": f"{soft}/{hard}",
        "started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    if args.non_reading > 0:
        results["non_reading"] = run_phase(
            "non-reading", args.python, checkout, non_reading, args.non_reading, args.words
        )
    if args.trickling > 0:
        results["trickling"] = run_phase(
            "trickling", args.python, checkout, trickling, args.trickling, args.ramp
        )

    if "non_reading" in results:
        s = results["non_reading"]["summary"]
        n = results["non_reading"]["clients"]
        print_table(
            f"{label}: {n} non-reading clients, ~3.5 MB bodies (server RSS and descriptors)",
            ["", label],
            [
                ["baseline RSS, MiB", s["baseline_rss_mib"]],
                [
                    "peak RSS above baseline, MiB",
                    f"{s['peak_rss_above_baseline_mib']} (at {s['peak_rss_at_s']:g} s)",
                ],
                ["RSS above baseline at 10 s, MiB", s["rss_above_baseline_at_10s_mib"]],
                [f"RSS above baseline at {WINDOW} s, MiB", s["rss_above_baseline_at_60s_mib"]],
                ["descriptors: baseline", s["baseline_fds"]],
                ["descriptors: peak", s["peak_fds"]],
                ["descriptors at 10 s", s["fds_at_10s"]],
                [f"descriptors at {WINDOW} s", s["fds_at_60s"]],
                ["descriptors back at baseline", s["fds_back"]],
                ["peak bytes in server send queues, MiB", s["peak_server_sendq_mib"]],
                [
                    "process peak RSS (VmHWM) above baseline, clients' close included, MiB",
                    s["process_peak_rss_above_baseline_mib"],
                ],
                [
                    "RSS above baseline after clients closed, MiB",
                    s["rss_above_baseline_after_close_mib"],
                ],
            ],
        )
    if "trickling" in results:
        s = results["trickling"]["summary"]
        n = results["trickling"]["clients"]
        print_table(
            f"{label}: {n} trickling bodies, 1 byte/s of Content-Length {TRICKLE_LENGTH}",
            ["", label],
            [
                ["descriptors: baseline", s["baseline_fds"]],
                ["descriptors: peak", f"{s['peak_fds']} (at {s['peak_fds_at_s']:g} s)"],
                ["descriptors at 10 s", s["fds_at_10s"]],
                [f"descriptors at {WINDOW} s", s["fds_at_60s"]],
                ["descriptors back at baseline", s["fds_back"]],
                ["clients answered 408", s["got_408"]],
                ["clients cut", s["cut"]],
                [f"clients still sending at {WINDOW} s", s["still_sending_at_60s"]],
                ["connects failed", s["connect_failed"]],
                ["first / last answer, s", f"{s['first_answer_at_s']} / {s['last_answer_at_s']}"],
                ["peak RSS above baseline, MiB", s["peak_rss_above_baseline_mib"]],
            ],
        )
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        write_json(args.json, results)


if __name__ == "__main__":
    main()

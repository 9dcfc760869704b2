"""The metrics relay: a small program specmon runs on an SSH host (`python3 -I -c <this file's text> MAX_BODY`, stdlib
only, Python 3.6 or newer) to read that host's servers' /metrics for it. Without it each run's read costs the app a
request packet and one or more answer packets on a channel of its own, each with its Python-level channel work; with
it a host's reads of one second are one write and, mostly, one answer. Never imported by specmon: only its text is
sent (`relayread`).

It reads asks on stdin, one line each, several in one write:

    ID ADDR PORT TIMEOUT_MS PATH [KEEP]

and, before the asks that name it, a set of line starts, once for this relay:

    keep KEEP NAME...

A standing ask is read at once and then again at every multiple of PERIOD_MS on this host's clock, until stopped:

    every PERIOD_MS ID ADDR PORT TIMEOUT_MS PATH [KEEP]
    stop ID

so an app that reads a server every second writes nothing to the link after asking once: the answers come on the
host's clock (the hosts of a fleet keep one time, so theirs reach the app in the same moment). A standing ask whose
last read is still unanswered (a hung server) is not asked again until it is: a host's reads never pile up.

An ok body asked with KEEP is cut to its lines (split at "\n") that start with one of the set's NAMEs, each ended
by "\n": the app parses only those (`parse_metrics`: the lines found after a newline), and a real server's answer is
tens of kB of histogram buckets and help lines that would cross the link every second to be thrown away. The
size limit (MAX_BODY, "large") is the whole answer's. A KEEP this relay was not told of (it restarted) keeps all.

It answers each on stdout as a line `ID KIND STATUS LENGTH` followed by LENGTH bytes, KIND being one of:
ok (STATUS and the body), refused, timeout, large (STATUS: the announced size, or -1 when it had none), bad (the body
says how the answer was not HTTP/1.x) or error (the body: the exception's type name). Its first line is
`specmon-relay 3`: it started.

Each ADDR PORT has its own thread and its own kept-alive connection: a server that accepts and never answers holds
up only its own reads. Answers that are ready together leave in one write; the first one waits for the others at
most LINGER_S. It ends when its stdin ends (the app left, or its link died): nothing of it stays on the host.
"""

import http.client
import os
import queue
import re
import socket
import sys
import threading
import time

HELLO = b"specmon-relay 3\n"
# Read only when run as the relay (`-c`): tests import this file for `lines_starting` and `kept_lines`.
MAX_BODY = int(sys.argv[1]) if __name__ == "__main__" and len(sys.argv) > 1 else 4 << 20
LINGER_S = 0.02   # how long a ready answer waits for the others of its batch: one write for a whole host's second
IDLE_S = 60.0     # a server not asked for this long (its run ended) gives up its thread and connection


class Answers:
    """The answers not yet written, and how many asks are still unanswered (a batch's last answer need not linger)."""

    def __init__(self) -> None:
        self.ready = queue.Queue()  # type: queue.Queue[bytes]
        self.lock = threading.Lock()
        self.open = 0

    def asked(self) -> None:
        with self.lock:
            self.open += 1

    def write_forever(self) -> None:
        out = sys.stdout.buffer
        while True:
            frames = [self.ready.get()]
            until = time.monotonic() + LINGER_S
            while True:
                with self.lock:
                    waiting = self.open - len(frames)
                left = until - time.monotonic()
                if waiting <= 0 or left <= 0:
                    break
                try:
                    frames.append(self.ready.get(timeout=left))
                except queue.Empty:
                    break
            with self.lock:
                self.open -= len(frames)
            try:
                out.write(b"".join(frames))
                out.flush()
            except OSError:   # the app is gone
                os._exit(0)


def lines_starting(names: "list[str]") -> "re.Pattern[bytes]":
    """The lines that start with one of `names`, found as the app finds them (`_lines_starting`) in a body with a
    newline put before it: a CRLF line's carriage return stays on it, a line that starts with a space is not one."""
    return re.compile(b"\n((?:" + b"|".join(re.escape(name.encode("ascii")) for name in sorted(names)) + b")[^\n]*)")


def kept_lines(body: bytes, keep: "re.Pattern[bytes]") -> bytes:
    return b"".join(line + b"\n" for line in keep.findall(b"\n" + body))


def frame(ask_id: int, kind: str, status: int = 0, body: bytes = b"") -> bytes:
    return b"%d %s %d %d\n" % (ask_id, kind.encode(), status, len(body)) + body


class Target(threading.Thread):
    """One server (ADDR PORT): its asks in turn, over one kept-alive connection."""

    def __init__(self, addr: str, port: int, answers: Answers, targets: "Targets") -> None:
        super().__init__(daemon=True)
        self.key = (addr, port)
        self.asks = queue.Queue()  # type: queue.Queue[tuple[int, float, str, re.Pattern[bytes] | None]]
        self.conn = http.client.HTTPConnection(addr, port)
        self.answers = answers
        self.targets = targets

    def run(self) -> None:
        while True:
            try:
                ask_id, timeout, path, keep = self.asks.get(timeout=IDLE_S)
            except queue.Empty:
                if self.targets.retire(self):
                    self.conn.close()
                    return
                continue
            self.answers.ready.put(self.answer(ask_id, timeout, path, keep))
            self.targets.answered(ask_id)

    def answer(self, ask_id: int, timeout: float, path: str, keep: "re.Pattern[bytes] | None") -> bytes:
        try:
            return self.get(ask_id, timeout, path, keep)
        except ConnectionRefusedError:
            kind, body = "refused", b""
        except socket.timeout:   # noqa: UP041 - not TimeoutError before Python 3.10, which hosts may run
            kind, body = "timeout", b""
        except http.client.BadStatusLine as exc:
            kind, body = "bad", str(exc.args[0] if exc.args else "").strip()[:80].encode("utf-8", "replace")
        except Exception as exc:
            kind, body = "error", type(exc).__name__.encode()
        self.conn.close()
        return frame(ask_id, kind, body=body)

    def get(self, ask_id: int, timeout: float, path: str, keep: "re.Pattern[bytes] | None") -> bytes:
        for attempt in range(2):
            kept = self.conn.sock is not None
            self.conn.timeout = timeout
            if kept:
                self.conn.sock.settimeout(timeout)
            try:
                self.conn.request("GET", path, headers={"Accept": "text/plain"})
                response = self.conn.getresponse()
                break
            except (http.client.RemoteDisconnected, ConnectionResetError, BrokenPipeError):
                # The server closed the kept-alive connection between reads: once more on a new one.
                self.conn.close()
                if not kept or attempt:
                    raise
        if response.length is not None and response.length > MAX_BODY:
            self.conn.close()
            return frame(ask_id, "large", response.length)
        body = response.read(MAX_BODY + 1)
        if len(body) > MAX_BODY:
            self.conn.close()
            return frame(ask_id, "large", -1)
        return frame(ask_id, "ok", response.status, body if keep is None else kept_lines(body, keep))


class Targets:
    """The servers asked about, each with its thread; one idle for IDLE_S leaves (asks for it later start another)."""

    def __init__(self, answers: Answers) -> None:
        self.answers = answers
        self.lock = threading.Lock()
        self.running = {}  # type: dict[tuple[str, int], Target]
        self.unanswered = set()  # type: set[int]

    def ask(self, ask_id: int, addr: str, port: int, timeout: float, path: str,
            keep: "re.Pattern[bytes] | None") -> None:
        with self.lock:
            target = self.running.get((addr, port))
            if target is None:
                target = self.running[(addr, port)] = Target(addr, port, self.answers, self)
                target.start()
            self.answers.asked()
            self.unanswered.add(ask_id)
            target.asks.put((ask_id, timeout, path, keep))

    def answered(self, ask_id: int) -> None:
        with self.lock:
            self.unanswered.discard(ask_id)

    def waiting(self, ask_id: int) -> bool:
        with self.lock:
            return ask_id in self.unanswered

    def retire(self, target: Target) -> bool:
        """Whether `target` may end: nothing was asked of it meanwhile (else it serves that first)."""
        with self.lock:
            if not target.asks.empty():
                return False
            del self.running[target.key]
            return True


class Standing(threading.Thread):
    """The standing asks (`every`), each asked again at the multiples of its period on this host's clock."""

    def __init__(self, targets: Targets) -> None:
        super().__init__(daemon=True)
        self.targets = targets
        self.wake = threading.Condition()
        self.asks = {}  # type: dict[int, tuple[float, tuple[str, int, float, str, re.Pattern[bytes] | None]]]
        self.due = {}   # type: dict[int, float]

    def add(self, ask_id: int, period: float, ask: "tuple[str, int, float, str, re.Pattern[bytes] | None]") -> None:
        self.targets.ask(ask_id, *ask)   # the first answer at once, not on the next multiple
        with self.wake:
            self.asks[ask_id] = (period, ask)
            self.due[ask_id] = next_multiple(time.time(), period)
            self.wake.notify()

    def stop(self, ask_id: int) -> None:
        with self.wake:
            self.asks.pop(ask_id, None)
            self.due.pop(ask_id, None)

    def run(self) -> None:
        while True:
            with self.wake:
                now = time.time()
                ripe = [ask_id for ask_id, at in self.due.items() if at <= now]
                for ask_id in ripe:
                    period, ask = self.asks[ask_id]
                    self.due[ask_id] = next_multiple(now, period)
                    if not self.targets.waiting(ask_id):
                        self.targets.ask(ask_id, *ask)
                # A clock set back (NTP) must not stall the reads: no ask waits longer than its period.
                for ask_id, at in self.due.items():
                    if at - now > self.asks[ask_id][0]:
                        self.due[ask_id] = next_multiple(now, self.asks[ask_id][0])
                self.wake.wait(min(self.due.values(), default=now + IDLE_S) - now)


def next_multiple(now: float, period: float) -> float:
    return (now // period + 1) * period


def main() -> None:
    answers = Answers()
    targets = Targets(answers)
    standing = Standing(targets)
    threading.Thread(target=answers.write_forever, daemon=True).start()
    standing.start()
    sys.stdout.buffer.write(HELLO)
    sys.stdout.buffer.flush()
    keeps = {}  # type: dict[str, re.Pattern[bytes]]
    for line in sys.stdin.buffer:
        fields = line.decode("ascii").split()
        if fields[0] == "keep":
            keeps[fields[1]] = lines_starting(fields[2:])
            continue
        if fields[0] == "stop":
            standing.stop(int(fields[1]))
            continue
        every = fields[0] == "every"
        if every:
            period_ms, fields = int(fields[1]), fields[2:]
        ask_id, addr, port, timeout_ms, path = fields[:5]
        ask = (addr, int(port), int(timeout_ms) / 1000, path, keeps.get(fields[5]) if len(fields) > 5 else None)
        if every:
            standing.add(int(ask_id), period_ms / 1000, ask)
        else:
            targets.ask(int(ask_id), *ask)
    os._exit(0)   # stdin ended: the app is gone; a thread stuck on a hung server must not keep this alive


if __name__ == "__main__":
    main()

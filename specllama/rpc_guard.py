"""Decoders on rpc-servers, guarded against a connection that breaks.

llama.cpp's RPC client cannot go on when a connection to an rpc-server breaks (the server died,
or its host went away): it aborts the process. From the first guard on, specllama's core
intercepts that abort, parks the thread that met it and counts the break (_core.rpc_failures());
whatever was waiting on that connection then waits for ever. So every call into a decoder placed on rpc-servers runs here in
a helper thread, and its caller waits for the call or for a break, whichever comes first. On a
break the caller gets RPCConnectionLost, within one poll of it, and the decoder is given up:

- it refuses every further call with the same error;
- its native objects are never freed (freeing them talks to the rpc-server, and the waiting
  thread may still be inside them), and neither are those of any decoder that was waiting on an
  rpc-server when the break came (llama.cpp does not say which connection broke);
- the rpc-servers it used are not used again in this process (llama.cpp's client keeps its one
  connection per server, broken), so a new decoder placed on one of them is refused: restart the
  rpc-server on another port, or restart this process.

Everything else in the process (decoders on this machine, decoders on other rpc-servers) goes on.
"""

from __future__ import annotations

import atexit
import ctypes
import re
import threading
import weakref
from typing import Any, Callable, Iterable, List, Optional, Set

from . import _core

POLL_S = 0.05  # how often a waiting caller looks for a broken connection

_ENDPOINT = re.compile(r"^\[?[^\s,]+\]?:\d+$")
_lost_endpoints: Set[str] = set()
_guards: "weakref.WeakSet[Guard]" = weakref.WeakSet()
_state = threading.Lock()
_helper = threading.local()  # inside: this thread is a helper thread of call()


class RPCConnectionLost(RuntimeError):
    """A connection to an rpc-server broke while a decoder placed on it was running (or it was
    placed on an rpc-server whose connection broke before). The decoder cannot run again in this
    process."""


def endpoints_of(*placements: Any) -> Set[str]:
    """The rpc-servers (HOST:PORT) the given placements (device names, lists of them, or
    "HOST:PORT,..." strings) name, directly or by a device name such as "RPC0"."""
    out: Set[str] = set()

    def visit(p: Any) -> None:
        if p is None:
            return
        if isinstance(p, str):
            for name in p.split(","):
                name = name.strip()
                if not name:
                    continue
                ep = _core.rpc_endpoint(name)
                if ep:
                    out.add(ep)
                elif _ENDPOINT.match(name):
                    out.add(name)
            return
        if isinstance(p, Iterable):
            for q in p:
                visit(q)

    for p in placements:
        visit(p)
    return out


def _keep_forever(obj: Any) -> None:
    """Never free obj, not even when the interpreter exits: freeing a native object placed on an
    rpc-server talks to the server, which would wait for ever on a broken connection."""
    if obj is not None:
        ctypes.pythonapi.Py_IncRef(ctypes.py_object(obj))


class Guard:
    """The rpc-servers of one decoder and its slots, and whether they are lost."""

    def __init__(self, endpoints: Set[str]) -> None:
        self.endpoints = frozenset(endpoints)
        self.lost: Optional[str] = None
        self._natives: "List[Any]" = []  # the native decoders this guard covers (weakly held)
        _core.rpc_park_breaks()
        with _state:
            self._check_endpoints()
            _guards.add(self)

    def _check_endpoints(self) -> None:
        gone = sorted(self.endpoints & _lost_endpoints)
        if gone and self.lost is None:
            self.lost = (f"the connection to rpc-server {', '.join(gone)} broke earlier in this process, and "
                         "llama.cpp's RPC client cannot open it again; restart that rpc-server on another port, "
                         "or restart this process")

    def check(self) -> None:
        """Raise RPCConnectionLost if this guard's decoders cannot run."""
        with _state:
            self._check_endpoints()
        if self.lost is not None:
            raise RPCConnectionLost(self.lost)

    def cover(self, native: Any) -> None:
        """Count native among the objects kept for ever if this guard is lost."""
        self._natives.append(weakref.ref(native))

    def lose(self) -> None:
        """Give up this guard's decoders: a connection broke while one of them waited."""
        message = _core.rpc_failure_message()
        where = message.split(": ", 1)[-1] if message else "the connection broke"
        with _state:
            if self.lost is None:
                self.lost = (f"a connection to an rpc-server ({', '.join(sorted(self.endpoints))}) broke while this "
                             f"decoder was waiting on it (llama.cpp: {where}); the decoder cannot run again in this "
                             "process: load it again once the rpc-server is back, on another port, or in a new "
                             "process")
            _lost_endpoints.update(self.endpoints)
        for ref in self._natives:
            _keep_forever(ref())

    def broken_since(self, seen: int) -> bool:
        """Whether a connection broke since the count seen (or this guard is lost already)."""
        return self.lost is not None or _core.rpc_failures() != seen

    def join(self, thread: threading.Thread, seen: int) -> None:
        """Wait for thread to end, unless a connection breaks first (the guard is then lost)."""
        while thread.is_alive():
            thread.join(POLL_S)
            if thread.is_alive() and self.broken_since(seen):
                self.lose()
                return

    def call(self, fn: Callable[[], Any], cancel: Optional[threading.Event] = None) -> Any:
        """fn() in a helper thread; its result or exception here, or RPCConnectionLost when a
        connection breaks first. Ctrl-C (KeyboardInterrupt) sets cancel, waits for fn to stop
        (fn must then stop within a step: it watches cancel) and is raised again. Called from a
        helper thread (a generation's on_step callback), fn runs there: a further helper thread
        would wait for the first one's lock for ever."""
        if getattr(_helper, "inside", False):
            return fn()
        self.check()
        seen = _core.rpc_failures()
        box: list = []
        done = threading.Event()

        def run() -> None:
            _helper.inside = True
            try:
                box.append((True, fn()))
            except BaseException as exc:  # handed to the caller
                box.append((False, exc))
            finally:
                done.set()

        threading.Thread(target=run, name="specllama-rpc-call", daemon=True).start()
        interrupted = False
        while True:
            try:
                if done.wait(POLL_S):
                    break
                if self.broken_since(seen):
                    if done.is_set():
                        break
                    self.lose()
                    raise RPCConnectionLost(self.lost)
            except KeyboardInterrupt:
                interrupted = True
                if cancel is None:
                    raise
                cancel.set()
        if self.broken_since(seen):
            # fn ended, but a connection broke meanwhile: a thread of this decoder may still wait on it
            self.lose()
        if interrupted:
            raise KeyboardInterrupt
        ok, value = box[0]
        if ok:
            return value
        raise value


@atexit.register
def _keep_at_exit() -> None:
    # an rpc-server may have gone while its decoders sat idle: freeing them at exit would wait on it
    for guard in list(_guards):
        for ref in guard._natives:
            _keep_forever(ref())

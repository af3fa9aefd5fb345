"""A page in a real headless Chromium, driven over the DevTools protocol.

Chromium speaks the protocol on file descriptors 3 (commands in) and 4
(events and replies out) with ``--remote-debugging-pipe``: NUL-terminated
JSON messages. That is enough to size the viewport, open a page, wait for its
load event and evaluate JavaScript in it, with no extra package and no
network port.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import subprocess
import time
from pathlib import Path
from typing import Any

#: Flags for a quiet, sandbox-less headless run as root in a container.
CHROMIUM_FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                  "--disable-component-update", "--disable-sync", "--no-first-run", "--disable-quic",
                  "--hide-scrollbars"]


def chromium() -> str:
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    assert found, "chromium is missing: run sbin/install-deps (apt-get install -y chromium)"
    return found


class ChromePage:
    """``with ChromePage(profile, width=1280) as page: page.open(url); page.evaluate(js)``."""

    def __init__(self, profile: Path, *, width: int = 1280, height: int = 900, timeout: float = 60.0) -> None:
        self.profile, self.width, self.height, self.timeout = profile, width, height, timeout
        self._next_id = 0
        self._buffer = b""
        self._session = ""

    def __enter__(self) -> ChromePage:
        to_chrome_r, self._to_chrome = os.pipe()
        self._from_chrome, from_chrome_w = os.pipe()
        keep_r, keep_w = os.dup(to_chrome_r), os.dup(from_chrome_w)

        def wire_pipes() -> None:  # in the child: the protocol's fds 3 and 4
            os.dup2(keep_r, 3)
            os.dup2(keep_w, 4)

        self._proc = subprocess.Popen(  # preexec_fn: the test process starts no threads
            [chromium(), *CHROMIUM_FLAGS, f"--user-data-dir={self.profile}", "--remote-debugging-pipe",
             "about:blank"],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
            close_fds=False, preexec_fn=wire_pipes)
        for fd in (to_chrome_r, from_chrome_w, keep_r, keep_w):
            os.close(fd)
        target = self.call("Target.createTarget", {"url": "about:blank"})["targetId"]
        self._session = self.call("Target.attachToTarget", {"targetId": target, "flatten": True})["sessionId"]
        self.call("Page.enable")
        self.call("Emulation.setDeviceMetricsOverride",
                  {"width": self.width, "height": self.height, "deviceScaleFactor": 1, "mobile": False})
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self._send("Browser.close", {}, session=False)
            self._proc.wait(timeout=20)
        except (OSError, subprocess.TimeoutExpired):
            pass  # killed below
        finally:
            if self._proc.poll() is None:
                self._proc.kill()
                self._proc.wait()
            os.close(self._to_chrome)
            os.close(self._from_chrome)

    def _send(self, method: str, params: dict[str, Any], *, session: bool = True) -> int:
        self._next_id += 1
        message: dict[str, Any] = {"id": self._next_id, "method": method, "params": params}
        if session and self._session:
            message["sessionId"] = self._session
        os.write(self._to_chrome, json.dumps(message).encode() + b"\0")
        return self._next_id

    def _receive(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buffer:
            left = deadline - time.monotonic()
            assert left > 0, "chromium did not answer in time"
            ready, _, _ = select.select([self._from_chrome], [], [], left)
            if ready:
                chunk = os.read(self._from_chrome, 1 << 16)
                assert chunk, f"chromium exited (code {self._proc.poll()})"
                self._buffer += chunk
        raw, self._buffer = self._buffer.split(b"\0", 1)
        return json.loads(raw)

    def call(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        wanted = self._send(method, params or {})
        deadline = time.monotonic() + self.timeout
        while True:
            message = self._receive(deadline)
            if message.get("id") == wanted:
                assert "error" not in message, f"{method}: {message['error']}"
                return message.get("result", {})

    def open(self, url: str) -> None:
        """Navigate and wait for the page's load event (images decoded)."""
        self._send("Page.navigate", {"url": url})
        deadline = time.monotonic() + self.timeout
        while self._receive(deadline).get("method") != "Page.loadEventFired":
            pass

    def evaluate(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", {"expression": expression, "returnByValue": True})
        assert "exceptionDetails" not in result, result["exceptionDetails"]
        return result["result"].get("value")

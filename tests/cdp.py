"""A tiny DevTools-protocol client over chromium's --remote-debugging-pipe (fd 3 in, fd 4 out; NUL-framed
JSON): enough to open a page, click at an element's centre with real mouse events, and read the DOM back."""

from __future__ import annotations

import json
import os
import subprocess
import time


def _high(fd: int) -> int:
    import fcntl

    moved = fcntl.fcntl(fd, fcntl.F_DUPFD, 20)
    os.close(fd)
    return moved


class Browser:
    def __init__(self, chromium: str, profile, url: str, size=(1200, 900)):
        to_child_r, self._w = os.pipe()
        self._r, from_child_w = os.pipe()
        # move the child's ends above 3 and 4, so that dup2 onto 3 and 4 in the child cannot clobber them
        to_child_r, from_child_w = (_high(to_child_r), _high(from_child_w))
        cmd = [chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-sync",
               "--disable-background-networking", "--disable-component-update", f"--user-data-dir={profile}",
               f"--window-size={size[0]},{size[1]}", "--remote-debugging-pipe", url]
        self.proc = subprocess.Popen(cmd, pass_fds=(3, 4), stdout=subprocess.DEVNULL,
                                     stderr=subprocess.DEVNULL,
                                     preexec_fn=lambda: (os.dup2(to_child_r, 3), os.dup2(from_child_w, 4)))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf, self._id, self.events, self.session = b"", 0, [], None
        targets = self.call("Target.getTargets")["targetInfos"]
        page = next(t for t in targets if t["type"] == "page")
        self.session = self.call("Target.attachToTarget", targetId=page["targetId"], flatten=True)["sessionId"]
        self.call("Runtime.enable")
        self.call("Page.enable")

    def _read(self) -> dict:
        while b"\0" not in self._buf:
            chunk = os.read(self._r, 1 << 16)
            if not chunk:
                raise RuntimeError("chromium closed the pipe")
            self._buf += chunk
        msg, self._buf = self._buf.split(b"\0", 1)
        return json.loads(msg)

    def call(self, method: str, **params):
        self._id += 1
        msg = {"id": self._id, "method": method, "params": params}
        if self.session and not method.startswith(("Target.", "Browser.")):
            msg["sessionId"] = self.session
        os.write(self._w, json.dumps(msg).encode() + b"\0")
        while True:
            reply = self._read()
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self.events.append(reply)

    def eval(self, expression: str):
        out = self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in out:
            raise RuntimeError(out["exceptionDetails"])
        return out["result"].get("value")

    def wait_for(self, expression: str, timeout: float = 20.0):
        end = time.time() + timeout
        while time.time() < end:
            try:
                value = self.eval(expression)
            except RuntimeError:  # no document yet (the first load is still starting)
                value = None
            if value:
                return value
            time.sleep(0.05)
        raise TimeoutError(expression)

    def click(self, selector: str) -> None:
        """Scroll the element into view and press and release the left button at its centre."""
        box = self.eval(f"(function(){{var e=document.querySelector({json.dumps(selector)});e.scrollIntoView({{block:'center'}});"
                        "var r=e.getBoundingClientRect();return [r.left+r.width/2,r.top+r.height/2];})()")
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=box[0], y=box[1], button="left", clickCount=1)

    def errors(self) -> list[dict]:
        return [e for e in self.events if e.get("method") in ("Runtime.exceptionThrown", "Runtime.consoleAPICalled")]

    def close(self) -> None:
        try:
            self.call("Browser.close")
        except (RuntimeError, OSError):
            pass
        try:
            self.proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
        os.close(self._w)
        os.close(self._r)

"""Headless Chromium driven over the DevTools protocol on a pipe (``--remote-debugging-pipe``):
one browser for every page of the built manual, standard library only.

:func:`page_problems` opens each page at a fixed window width and reports what a reader would
see broken there: MyST markup left as text (a directive fence that did not open), an image that
is not drawn, a table wider than the content column that is not in a scrolling frame with its
first column fixed. ``python tests/chromium_pages.py SITE PAGE PNG [ELEMENT_ID]`` takes a
screenshot of one page (scrolled to an element) the same way.
"""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", "--remote-debugging-pipe"]

#: Text that only shows when MyST left a directive unparsed.
UNRENDERED = ("```{", ":name:", ":alt:")

# Run in the page: what is wrong with it, one string per problem.
_INSPECT = """((patterns) => {
  const out = [];
  const main = document.querySelector('article[role=main]') || document.body;
  const col = main.getBoundingClientRect();
  const text = main.innerText;
  for (const pat of patterns) {
    const i = text.indexOf(pat);
    if (i >= 0) out.push(`unrendered markup ${pat}: ` +
        JSON.stringify(text.slice(Math.max(0, i - 60), i + 100)));
  }
  for (const img of document.images) {
    if (!img.complete || img.naturalWidth === 0)
      out.push(`image not drawn: ${img.getAttribute('src')}`);
  }
  main.querySelectorAll('table').forEach((t, i) => {
    const r = t.getBoundingClientRect();
    if (r.right <= col.right + 1) return;
    const head = (t.rows[0] ? t.rows[0].innerText : '').replace(/\\s+/g, ' ').slice(0, 70);
    const what = `table ${i + 1} (${head}) is ${Math.round(r.width)} px wide in a ` +
                 `${Math.round(col.width)} px column`;
    let frame = t.parentElement;
    while (frame && frame !== main &&
           !['auto', 'scroll'].includes(getComputedStyle(frame).overflowX))
      frame = frame.parentElement;
    if (!frame || frame === main || frame.getBoundingClientRect().right > col.right + 1) {
      out.push(what + ' and overflows it');
      return;
    }
    const cells = Array.from(t.rows).map(row => row.cells[0]).filter(c => c);
    if (!cells.every(c => getComputedStyle(c).position === 'sticky'))
      out.push(what + ', in a scrolling frame whose first column scrolls away');
    if (t.caption && t.caption.getBoundingClientRect().right > col.right + 1)
      out.push(what + ', its caption cut off by the frame');
  });
  return out;
})(""" + json.dumps(list(UNRENDERED)) + ")"


def find_chromium() -> str | None:
    """Debian's ``chromium`` (or ``chromium-browser``), or None."""
    return shutil.which("chromium") or shutil.which("chromium-browser")


class Browser:
    """One headless Chromium and one tab, spoken to over the DevTools pipe."""

    def __init__(self, exe: str, width: int = 1280, height: int = 1000,
                 timeout: float = 60.0) -> None:
        self.timeout = timeout
        self._profile = tempfile.mkdtemp(prefix="hvdcore-chromium-")
        to_child_r, self._to_child = os.pipe()
        self._from_child, from_child_w = os.pipe()

        def fds() -> None:  # the pipe's ends become the child's fds 3 (commands) and 4 (replies)
            a, b = os.dup(to_child_r), os.dup(from_child_w)
            os.dup2(a, 3)
            os.dup2(b, 4)

        self._proc = subprocess.Popen(
            [exe, *FLAGS, f"--user-data-dir={self._profile}", f"--window-size={width},{height}",
             "about:blank"], stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL, preexec_fn=fds, pass_fds=(3, 4))
        os.close(to_child_r)
        os.close(from_child_w)
        self._buf = b""
        self._id = 0
        self._events: list[dict[str, Any]] = []
        try:
            target = self.call("Target.createTarget", url="about:blank")["targetId"]
            self.session = self.call("Target.attachToTarget", targetId=target,
                                     flatten=True)["sessionId"]
            self.call("Page.enable", session=True)
            self.call("Emulation.setDeviceMetricsOverride", session=True, width=width,
                      height=height, deviceScaleFactor=1, mobile=False)
        except BaseException:
            self.close()  # a browser that did not come up is not left running
            raise

    def _read(self, deadline: float) -> dict[str, Any]:
        while b"\0" not in self._buf:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self._from_child], [], [], left)[0]:
                raise TimeoutError("Chromium did not answer")
            chunk = os.read(self._from_child, 1 << 20)
            if not chunk:
                raise RuntimeError(f"Chromium exited ({self._proc.poll()})")
            self._buf += chunk
        msg, _, self._buf = self._buf.partition(b"\0")
        return json.loads(msg)

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        """Send one command and return its result (events met meanwhile are kept)."""
        self._id += 1
        msg: dict[str, Any] = {"id": self._id, "method": method, "params": params}
        if session:
            msg["sessionId"] = self.session
        os.write(self._to_child, json.dumps(msg).encode() + b"\0")
        deadline = time.monotonic() + self.timeout
        while True:
            reply = self._read(deadline)
            if reply.get("id") == self._id:
                if "error" in reply:
                    raise RuntimeError(f"{method}: {reply['error']}")
                return reply.get("result", {})
            self._events.append(reply)

    def wait_event(self, method: str) -> dict[str, Any]:
        """The next event ``method`` of this tab."""
        deadline = time.monotonic() + self.timeout
        while True:
            for i, ev in enumerate(self._events):
                if ev.get("method") == method and ev.get("sessionId") == self.session:
                    del self._events[: i + 1]
                    return ev
            self._events.clear()
            self._events.append(self._read(deadline))

    def open(self, url: str) -> None:
        """Load ``url`` and wait for its load event (images included)."""
        self._events.clear()
        self.call("Page.navigate", session=True, url=url)
        self.wait_event("Page.loadEventFired")

    def evaluate(self, expression: str) -> Any:
        """The value of a JavaScript expression in the page."""
        res = self.call("Runtime.evaluate", session=True, expression=expression,
                        returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in res:
            raise RuntimeError(f"page script failed: {res['exceptionDetails']}")
        return res["result"].get("value")

    def screenshot(self, path: Path, element_id: str | None = None) -> None:
        """A PNG of the window, scrolled to ``element_id`` first when given."""
        if element_id:
            self.evaluate(f"document.getElementById({json.dumps(element_id)})"
                          ".scrollIntoView({behavior: 'instant'})")
        data = self.call("Page.captureScreenshot", session=True, format="png")["data"]
        path.write_bytes(base64.b64decode(data))

    def close(self) -> None:
        """End Chromium (the process this object started) and remove its profile."""
        try:
            self.call("Browser.close")
        except (RuntimeError, TimeoutError, OSError):
            pass
        try:
            self._proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self._proc.kill()
            self._proc.wait()
        os.close(self._to_child)
        os.close(self._from_child)
        shutil.rmtree(self._profile, ignore_errors=True)

    def __enter__(self) -> Browser:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def page_problems(browser: Browser, site: Path, pages: list[Path]) -> dict[str, list[str]]:
    """For each page (relative to ``site``) what a reader sees broken there; a page with no
    problem is left out."""
    found: dict[str, list[str]] = {}
    for rel in pages:
        browser.open((site / rel).as_uri())
        problems = browser.evaluate(_INSPECT)
        if problems:
            found[str(rel)] = problems
    return found


def main(argv: list[str]) -> int:
    """``SITE PAGE PNG [ELEMENT_ID]``: one screenshot at 1280 px, and the page's problems."""
    site, page, png = Path(argv[0]), Path(argv[1]), Path(argv[2])
    exe = find_chromium()
    if exe is None:
        print("no chromium on PATH", file=sys.stderr)
        return 2
    with Browser(exe) as browser:
        print(json.dumps(page_problems(browser, site, [page]), indent=1))
        browser.screenshot(png, argv[3] if len(argv) > 3 else None)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

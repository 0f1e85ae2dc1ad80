"""A text progress bar on stderr for long benchmark runs.

    p = Progress(total_weight)      # weights: rough seconds of each step
    p.step("fashion-mnist: pgbench cpu c=4", weight=5)
    p.tick(0.5)                     # fraction of the current step done
    p.finish()

On a terminal the bar is redrawn in place; otherwise (a log, the device tool) one line is written
per step, so the output stays readable.
"""
import sys
import time


def _fmt(secs):
    secs = int(max(0, secs))
    return f"{secs // 60}:{secs % 60:02d}"


class Progress:
    def __init__(self, total, stream=None, width=28):
        self.total = max(total, 1e-9)
        self.done = 0.0
        self.cur = 0.0
        self.frac = 0.0
        self.label = ""
        self.width = width
        self.stream = stream or sys.stderr
        self.tty = hasattr(self.stream, "isatty") and self.stream.isatty()
        self.t0 = time.time()
        self.last = 0.0

    def step(self, label, weight=1.0):
        self.done += self.cur
        self.cur = weight
        self.frac = 0.0
        self.label = label
        self._draw(force=True)

    def tick(self, frac):
        self.frac = max(0.0, min(1.0, frac))
        self._draw()

    def _draw(self, force=False):
        now = time.time()
        if not force and now - self.last < 0.25:
            return
        self.last = now
        f = min(1.0, (self.done + self.cur * self.frac) / self.total)
        n = int(round(f * self.width))
        el = now - self.t0
        eta = el / f - el if f > 0.02 else float("nan")
        bar = f"[{'#' * n}{'.' * (self.width - n)}] {100 * f:3.0f}%  {_fmt(el)}"
        bar += f" (eta {_fmt(eta)})" if eta == eta else ""
        if self.tty:
            self.stream.write("\r\033[K" + bar + "  " + self.label[:60])
            self.stream.flush()
        elif force:
            self.stream.write(bar + "  " + self.label + "\n")
            self.stream.flush()

    def note(self, text):
        """A line of text that does not break the bar."""
        if self.tty:
            self.stream.write("\r\033[K")
        self.stream.write(text + "\n")
        self.stream.flush()
        if self.tty:
            self.last = 0
            self._draw(force=True)

    def finish(self):
        self.done = self.total
        self.cur = 0
        self.label = "done"
        self._draw(force=True)
        if self.tty:
            self.stream.write("\n")
            self.stream.flush()

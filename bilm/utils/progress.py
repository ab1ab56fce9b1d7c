"""A one-line progress display for long loops, as readable in a log file as on a terminal."""
import sys
import time

BAR_WIDTH = 24


class Progress:
    """Shows `done/total`, a bar, the time per unit, the time left and named values.

    On a terminal the line is redrawn in place. Anywhere else (a file, a
    pipe) a plain line is written at most every `log_interval` seconds and
    once at the end, without carriage returns or colour codes.

    The time per unit and the time left leave out the first update, whose
    unit usually includes one-off work (tracing, compiling): the first line
    shows no estimate, and later ones the rate since the first.

    Args:
        total: units in all, or None when unknown.
        unit: what one unit is, for the time per unit (`"batch"`).
        verbose: 0 shows nothing.
        file: the stream to write to (default: `sys.stdout` at each write).
        log_interval: seconds between lines when not on a terminal.
        clock: the time source, seconds (tests pass a fake one).

    Example:
    ```python
    progress = Progress(len(batches), unit="batch")
    for done, batch in enumerate(batches, start=1):
        loss = step(batch)
        progress.update(done, [("loss", loss)])
    progress.close()
    ```
    """

    def __init__(self, total, unit="step", verbose=1, file=None, log_interval=30.0, clock=time.monotonic):
        self.total = total
        self.unit = unit
        self.verbose = verbose
        self.log_interval = log_interval
        self._file = file
        self._clock = clock
        self._started = clock()
        self._first = None  # (time, done) at the first update
        self._done = 0
        self._values = ()
        self._line_width = 0  # of the terminal line being redrawn (0: none open)
        self._last_logged = None  # when the last line went to a log
        self._unlogged = False  # the latest state has not gone to the log yet

    @property
    def file(self):
        return self._file if self._file is not None else sys.stdout

    @property
    def interactive(self):
        isatty = getattr(self.file, "isatty", None)
        return bool(isatty and isatty())

    def update(self, done, values=()):
        """Records that `done` units are done; `values` are `(name, number)` pairs to show."""
        if not self.verbose:
            return
        now = self._clock()
        if self._first is None:
            self._first = (now, done)
        self._done, self._values = done, tuple(values)
        finished = self.total is not None and done >= self.total
        if self.interactive:
            line = self._line(now)
            self.file.write("\r" + line.ljust(self._line_width))
            self._line_width = max(len(line), 1)
            self.file.flush()
        elif finished or self._last_logged is None or now - self._last_logged >= self.log_interval:
            self._last_logged, self._unlogged = now, False
            self.file.write(self._line(now) + "\n")
            self.file.flush()
        else:
            self._unlogged = True

    def write(self, message):
        """Writes `message` on a line of its own (after the progress line)."""
        if not self.verbose:
            return
        self._end_line()
        self.file.write(message + "\n")
        self.file.flush()

    def close(self):
        """Ends the progress line (a log gets the last state if it was not written yet)."""
        if not self.verbose:
            return
        if self._unlogged:
            self._unlogged = False
            self.file.write(self._line(self._clock()) + "\n")
        self._end_line()
        self.file.flush()

    def _end_line(self):
        if self._line_width:
            self.file.write("\n")
            self._line_width = 0

    def _line(self, now):
        parts = [self._count()]
        seconds_per_unit = self._seconds_per_unit(now)
        finished = self.total is not None and self._done >= self.total
        if finished:
            parts.append(f"{format_duration(now - self._started)} in all")
        elif seconds_per_unit is not None and self.total is not None:
            parts.append(f"{format_duration(seconds_per_unit * (self.total - self._done))} left")
        if seconds_per_unit is not None:
            parts.append(f"{_format_seconds_per_unit(seconds_per_unit)}/{self.unit}")
        parts += [f"{name} {format_number(value)}" for name, value in self._values]
        return " - ".join(parts)

    def _count(self):
        if self.total is None:
            return f"{self._done} {self.unit}{'es' if self.unit.endswith('h') else 's'}"
        width = len(str(self.total))
        filled = int(BAR_WIDTH * min(self._done / self.total, 1.0)) if self.total else BAR_WIDTH
        bar = "=" * filled + (">" if filled < BAR_WIDTH else "") + "." * max(BAR_WIDTH - filled - 1, 0)
        return f"{self._done:>{width}}/{self.total} [{bar}]"

    def _seconds_per_unit(self, now):
        """The time per unit since the first update, or None before two updates."""
        first_time, first_done = self._first
        if self._done <= first_done or now <= first_time:
            return None
        return (now - first_time) / (self._done - first_done)


def format_number(value):
    """A number as a person reads it: `21,577`, `118`, `16.2`, `7.49`, `0.0312`."""
    if isinstance(value, int) or (isinstance(value, float) and value.is_integer() and abs(value) >= 1000):
        return f"{int(value):,}"
    value = float(value)
    if value != value or value in (float("inf"), float("-inf")):
        return str(value)
    magnitude = abs(value)
    if magnitude >= 100:
        return f"{value:,.0f}"
    if magnitude >= 10:
        return f"{value:.1f}"
    return f"{value:.3g}"


def format_duration(seconds):
    """`45s`, `3:07`, `1:02:03`."""
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    minutes, seconds = divmod(seconds, 60)
    if minutes < 60:
        return f"{minutes}:{seconds:02d}"
    hours, minutes = divmod(minutes, 60)
    return f"{hours}:{minutes:02d}:{seconds:02d}"


def _format_seconds_per_unit(seconds):
    if seconds >= 1:
        return f"{seconds:.1f}s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.0f}ms"
    return f"{seconds * 1e6:.0f}us"

"""Progress: readable numbers, an estimate that leaves out the first (tracing) step, no control codes in logs."""
import io

from bilm.utils.progress import Progress, format_duration, format_number


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


class Terminal(io.StringIO):
    def isatty(self):
        return True


def test_numbers_and_durations_read_as_a_person_writes_them():
    assert [format_number(v) for v in (21576.6839, 118.0902, 16.231, 7.4933, 0.031234, 250, 12_000.0)] == [
        "21,577", "118", "16.2", "7.49", "0.0312", "250", "12,000"]
    assert [format_duration(s) for s in (4.4, 187, 3723)] == ["4s", "3:07", "1:02:03"]


def test_the_first_step_is_left_out_of_the_time_left():
    clock, log = Clock(), io.StringIO()
    progress = Progress(1000, unit="batch", file=log, log_interval=0, clock=clock)
    clock.now = 8.0  # the first step traces: 8 s
    progress.update(1, [("perplexity", 118.0902)])
    clock.now = 8.2
    progress.update(11, [("perplexity", 86.87), ("tokens/sec", 22183.3242)])
    first, second = log.getvalue().splitlines()
    assert first == "   1/1000 [>.......................] - perplexity 118"
    # 10 batches in 0.2 s: 20 ms a batch, 989 left.
    assert second == ("  11/1000 [>.......................] - 20s left - 20ms/batch - perplexity 86.9 - "
                      "tokens/sec 22,183")


def test_a_log_file_gets_plain_lines_at_intervals_and_the_last_state():
    clock, log = Clock(), io.StringIO()
    progress = Progress(100, unit="sentence", file=log, log_interval=30, clock=clock)
    for done in range(1, 51):
        clock.now = done * 1.0
        progress.update(done)
    progress.write("a message")
    progress.close()
    text = log.getvalue()
    assert "\r" not in text and "\x1b" not in text and "\b" not in text
    lines = text.splitlines()
    assert [line.split()[0] for line in lines] == ["1/100", "31/100", "a", "50/100"]
    assert lines[2] == "a message"


def test_a_terminal_line_is_redrawn_in_place_and_messages_go_below_it():
    clock, screen = Clock(), Terminal()
    progress = Progress(2, unit="batch", file=screen, clock=clock)
    clock.now = 1.0
    progress.update(1)
    progress.write("Epoch 1: held-out perplexity 16.231")
    clock.now = 3.0
    progress.update(2)
    progress.close()
    assert screen.getvalue() == ("\r1/2 [============>...........]\nEpoch 1: held-out perplexity 16.231\n"
                                 "\r2/2 [========================] - 3s in all - 2.0s/batch\n")
    assert "\x1b" not in screen.getvalue()


def test_verbose_0_writes_nothing():
    log = io.StringIO()
    progress = Progress(3, file=log, verbose=0)
    progress.update(1)
    progress.write("x")
    progress.close()
    assert log.getvalue() == ""

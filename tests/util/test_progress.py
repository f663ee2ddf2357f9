"""Progress when output is not a terminal (issue 19): a line per stage, periodic counts, a final line; and the
real CLI redirected to a file prints them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from haldet.util.progress import LogLines
from repo_paths import FIXTURES


def test_log_lines_start_periodic_counts_and_done() -> None:
    lines: list[str] = []
    now = [0.0]
    make = LogLines(lines.append, interval=30.0, clock=lambda: now[0])
    make("gsm8k | m: 3 items ready", 0)
    advance = make("generate [gsm8k | m]", 10)
    for t in (10, 20, 35, 50, 70, 80):  # one item every step; counts printed at most every 30 s
        now[0] = float(t)
        advance(1)
    now[0] = 100.0
    advance(4)
    text = [line.split("] ", 1)[1] for line in lines]
    assert text[0] == "gsm8k | m: 3 items ready"
    assert text[1] == "generate [gsm8k | m]: started, 10 to do"
    assert text[2].startswith("generate [gsm8k | m]: 3/10 (30%), 35 s so far")
    assert text[3].startswith("generate [gsm8k | m]: 5/10 (50%), 70 s so far")
    assert text[4] == "generate [gsm8k | m]: done 10/10 in 100 s, 0.10/s"
    assert len(text) == 5


def test_a_stage_inside_one_long_batch_still_prints_counts() -> None:
    lines: list[str] = []
    now = [0.0]
    make = LogLines(lines.append, interval=30.0, clock=lambda: now[0])
    make("sample [gsm8k | m]", 3)  # one batch: no advance for minutes
    for t in (10.0, 31.0, 45.0, 62.0):
        now[0] = t
        make.tick()  # what the heartbeat thread calls every second
    text = [line.split("] ", 1)[1] for line in lines]
    assert text == ["sample [gsm8k | m]: started, 3 to do", "sample [gsm8k | m]: 0/3 (0%), 31 s so far",
                    "sample [gsm8k | m]: 0/3 (0%), 62 s so far"]


def test_cli_redirected_prints_stage_lines(cli: Any, tmp_path: Path) -> None:
    fixtures = FIXTURES / "datasets"
    proc = cli("run", "--dataset", "gsm8k", "--data-dir", str(fixtures), "--limit", "2", "--max-new-tokens", "4",
               "--detector", "perplexity", "--judge", "rule", "--out", str(tmp_path / "r"), "--allow-failures")
    assert "gsm8k | smollm2-135m: 2 items from" in proc.stderr
    assert "generate [gsm8k | smollm2-135m]: started, 2 to do" in proc.stderr
    assert "generate [gsm8k | smollm2-135m]: done 2/2" in proc.stderr


def test_counts_say_how_many_are_stored_while_a_batch_is_pending() -> None:
    """K=5 sampling decoded 3 of 30 with none stored yet: the count line says so (issue 32)."""
    from haldet.util.progress import stored

    lines: list[str] = []
    now = [0.0]
    make = LogLines(lines.append, interval=30.0, clock=lambda: now[0])
    advance = make("sample [q | m]", 30)
    stored(advance, 0)
    now[0] = 40.0
    advance(3)
    now[0] = 80.0
    stored(advance, 3)
    advance(3)
    text = [line.split("] ", 1)[1] for line in lines]
    assert text[1].startswith("sample [q | m]: 3/30 computed, 0 stored (the rest when their batch is) (10%), 40 s")
    assert text[2].startswith("sample [q | m]: 6/30 computed, 3 stored")


def test_a_task_finished_short_of_its_total_prints_done_and_no_more_counts() -> None:
    """HalluLens build tasks end with fewer items than planned: one done line each, no heartbeats after it."""
    from haldet.util.progress import finish

    lines: list[str] = []
    now = [0.0]
    make = LogLines(lines.append, interval=30.0, clock=lambda: now[0])
    advance = make("build nonexistent (seed 0)", 10)
    now[0] = 20.0
    advance(7)
    finish(advance)
    for t in (60.0, 120.0):
        now[0] = t
        make.tick()
    finish(advance)  # twice: still one done line
    text = [line.split("] ", 1)[1] for line in lines]
    assert text == ["build nonexistent (seed 0): started, 10 to do",
                    "build nonexistent (seed 0): done 7/10 in 20 s, 0.35/s"]

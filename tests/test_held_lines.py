"""A thread's console lines held and written at once (scheduler_core/logs.py): the worker
writes the outcome lines of one ack batch in one write (docs/performance.md, "The
outcome line")."""

import logging
import os
import threading

import pytest

from runs.execution.outcomes import report
from scheduler_core import logs
from scheduler_core.logs import ConsoleHandler, held_lines, write_held
from scheduler_project.logging_config import django_logging


class Counted:
    """A stream that keeps each write."""

    def __init__(self):
        self.writes: list[str] = []

    def write(self, text: str) -> None:
        self.writes.append(text)

    def flush(self) -> None:
        pass


@pytest.fixture
def console():
    stream = Counted()
    handler = ConsoleHandler(stream)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    logger = logging.getLogger("test.held")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    logger.propagate = False
    yield logger, stream
    logger.removeHandler(handler)


def test_lines_held_in_a_block_are_written_in_one_write_in_order(console):
    logger, stream = console
    with held_lines():
        for i in range(3):
            logger.info("line %s", i)
        assert stream.writes == []
    assert stream.writes == ["test.held line 0\ntest.held line 1\ntest.held line 2\n"]


def test_outside_a_block_each_line_is_its_own_write(console):
    logger, stream = console
    logger.info("a")
    logger.info("b")
    assert stream.writes == ["test.held a\n", "test.held b\n"]


def test_the_held_lines_are_written_when_the_block_raises(console):
    logger, stream = console
    with pytest.raises(RuntimeError), held_lines():
        logger.info("kept")
        raise RuntimeError("boom")
    assert stream.writes == ["test.held kept\n"]


def test_another_threads_lines_are_not_held(console):
    logger, stream = console
    with held_lines():
        other = threading.Thread(target=logger.info, args=("from another thread",))
        other.start()
        other.join()
        assert stream.writes == ["test.held from another thread\n"]
        logger.info("mine")
    assert stream.writes[-1] == "test.held mine\n"


def test_a_nested_block_writes_at_the_outermost_end(console):
    logger, stream = console
    with held_lines():
        with held_lines():
            logger.info("inner")
        assert stream.writes == []
        logger.info("outer")
    assert stream.writes == ["test.held inner\ntest.held outer\n"]


def test_write_held_writes_another_threads_held_lines_once(console):
    """What a daemon's stop watchdog does before os._exit: the main thread's held lines
    would otherwise be lost with the process."""
    logger, stream = console
    holding, release = threading.Event(), threading.Event()

    def hold():
        with held_lines():
            logger.info("held 1")
            logger.info("held 2")
            holding.set()
            release.wait(5)

    other = threading.Thread(target=hold)
    other.start()
    assert holding.wait(5)
    assert stream.writes == []
    write_held()
    assert stream.writes == ["test.held held 1\ntest.held held 2\n"]
    release.set()
    other.join()
    assert stream.writes == ["test.held held 1\ntest.held held 2\n"]


def test_the_daemons_console_is_the_handler_that_holds():
    assert django_logging("INFO")["handlers"]["console"]["class"] == (
        "scheduler_core.logs.ConsoleHandler")


def test_an_outcome_line_keeps_its_fields_and_text(caplog):
    with caplog.at_level(logging.INFO, logger="scheduler.runs"):
        report(run_id=7, job_id=3, handler="noop", attempt=2, outcome="succeeded",
               state="succeeded", duration_s=0.25)
    record = caplog.records[-1]
    assert record.getMessage() == "run 7 succeeded (job 3, handler noop, attempt 2 in 0.250 s)"
    assert (record.run_id, record.job_id, record.attempt, record.duration_s) == (7, 3, 2, 0.25)
    assert record.name == "scheduler.runs" and record.levelno == logging.INFO
    # No walk up the stack, but a file and line a format may show: report's.
    assert record.pathname.endswith("outcomes.py") and record.lineno > 1


def test_a_forked_child_holds_none_of_its_parents_lines():
    """A child's new threads may take its parent's threads' idents: none may find a list
    of the parent's lines there, held for ever (os.register_at_fork in logs.py)."""
    with logs.held_lines():
        pid = os.fork()
        if pid == 0:
            os._exit(0 if not logs._holding else 1)
        _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0

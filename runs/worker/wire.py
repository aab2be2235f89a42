"""The wire between the worker and its children: what crosses the pipe and how it is
framed (both ends; runs/worker/pool.py holds the parent's pipe, runs/worker/child.py the
child's).

Protocol, parent -> child: a list of task dicts (run_id, job_id, attempt, scheduled_at,
deadline, handler, payload, seq) to run in order, one message per list, or None: exit
(a retired child, runs/worker/recycle.py); the two times are sent
as integer microseconds since the Unix epoch (runs/clock.py, to_us) and the payload as
JSON text, as the database returned it: pickling an aware datetime costs 15-20 µs, most
of a no-op run's share of the worker's time (BENCHMARKS.md), while integers and text are
exact and cheap. A payload that does not decode fails its run (json.loads in the handler's
try).
Child -> parent: ``("heartbeat", run_id)`` and ``("log", run_id, lines, dropped)`` any number of
times, then ``("done", run_id, attempt, ok, result, error, logs, began, finished, retry)``
(``retry``: runs/types.py, Outcome.retry): a
run still going after LOG_STREAM_S sends its log lines as they come (at most every
LOG_STREAM_S), so the lines of a run that never returns (cut off by its timeout, or its
process dead) reach the worker; the others come with ``done``. ``began``
and ``finished`` are the child's time.monotonic() around the handler (CLOCK_MONOTONIC,
shared by the processes of one host). The parent may send several tasks ahead; the child
runs them in order. ``seq`` numbers the tasks sent to one child, 1, 2, ...: the parent can
take back the tasks waiting behind a run that has gone long (runs/worker/pool.py,
Slot.take_back) through two integers it shares with the child under a lock, ``control``:
[the seq of the task the child last started, the seq up to which it must skip tasks, the
seq of the task whose handler is to stop, whether the child may ack workflow nodes
itself, the last seq given out, the runs it may still start (runs/worker/handoff.py,
BUDGET)]. A skipped task gets no reply. To stop a
cancelled run's handler the parent sets the third and sends the child SIGUSR1
(runs/worker/child.py, RunCancelled).
A workflow node's task also carries ``watched`` (True), ``queue`` and ``shard``: its
child may ack its success itself and then start the run that ack continued, numbered by
the child (runs/worker/handoff.py). It then sends, instead of ``done``,
``("acking", <done's fields>)`` before the ack and, after it, either ``("ack_back",
run_id)`` (the parent acks the outcome it was sent) or ``("acked", run_id, attempt,
outcome, error, fate, pushed, books, continued, at)``: the state the ack gave the run, how
many runs it left to the broker (None: not known), the broker's bookkeeping owed
(handoff.books_wire), the seq of the continued run the child started (0: none; its
lease is the books' first taken) and the child's time.monotonic() then. ``acking`` and
``acked`` go through the child's quiet pipe (quiet_sender), read by the parent before the
main one and at least every CHILD_ACKS_READ_S (runs/worker/supervise.py). Each quiet
frame carries how many main-pipe messages the child had sent before it: the parent puts
it back among them (in_order), held until those are read.

Runs of async handlers go over a third pipe, the async pipe (parent -> child, read by
the child's event loop: runs/worker/child_async.py, write_frame): lists of task dicts
(with ``timeout_s``) to start at once, and ``{"cancel": seq}``. They report over the main
pipe as sync runs do, or with ``("timed_out", run_id, attempt, error, logs, began,
finished)`` when their timeout cancelled them.

Every message is framed as Connection.send_bytes frames it: a 4-byte big-endian length,
then the pickle; a quiet one has that count (8 bytes) between the two (QUIET_HEADER).
"""

import os
import pickle
import select
import struct
import threading

# Longest frame the quiet pipe takes: a write of at most PIPE_BUF bytes is atomic.
QUIET_MAX = select.PIPE_BUF
# A quiet frame's header: the pickle's length and how many messages the child had sent
# on the main pipe before it (in_order puts it back among them).
QUIET_HEADER = struct.Struct("!iQ")


def task_of(run_id: int, attempt: int, t: dict) -> dict:
    """The task the pipe carries for attempt ``attempt`` of run ``run_id`` (without its
    ``deadline`` and ``seq``), from ``t``, a lease's task (Lease.task: job_id,
    scheduled_at_us, handler, payload as JSON text; max_attempts and retry, the job's, where
    the lease read them: the child logs an attempt the retry gives up on at ERROR; trace,
    the run's traceparent or None: runs/tracing.py; not_before, for a run leased before
    its run_at: the child does not start the handler before it, runs/worker/child.py)."""
    return {"run_id": run_id, "job_id": t["job_id"], "attempt": attempt,
            "scheduled_at": t["scheduled_at_us"], "handler": t["handler"],
            "payload": t["payload"], "max_attempts": t.get("max_attempts"),
            "retry": t.get("retry"), "trace": t.get("trace"),
            "not_before": t.get("not_before")}


def send_tasks(conn, tasks: list[dict]) -> None:
    """Parent side: send ``tasks`` (runs in order) over ``conn`` as one message. Raises
    OSError when the child is gone."""
    conn.send_bytes(pickle.dumps(tasks, pickle.HIGHEST_PROTOCOL))


def write_frame(fd: int, message) -> None:
    """Parent side: write ``message`` to a child's async pipe ``fd`` (blocking), framed as
    send_bytes frames it (runs/worker/child_async.py reads it). Raises OSError when the
    child is gone."""
    data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
    view = memoryview(struct.pack("!i", len(data)) + data)
    while view:
        view = view[os.write(fd, view):]


def send_stop(conn) -> None:
    """Parent side: tell the child to exit once it has read what was sent before (a
    message of None). Raises OSError when the child is gone."""
    conn.send_bytes(pickle.dumps(None, pickle.HIGHEST_PROTOCOL))


def receive_messages(conn, received: bytearray) -> list[tuple]:
    """Parent side: the messages the child has sent so far over ``conn``, read with one
    system call (a busy worker reads dozens at once; Connection.recv costs three calls
    each). ``received`` holds the bytes of a message not yet whole between calls (this
    call consumes what it decodes). Raises EOFError once the child is gone."""
    chunk = os.read(conn.fileno(), 1 << 16)
    if not chunk:
        raise EOFError
    received += chunk
    return decode(received)


def decode(received: bytearray) -> list[tuple]:
    """The whole messages at the start of ``received`` (4-byte length, pickle), removed
    from it; a message not yet whole stays."""
    messages, at = [], 0
    while len(received) - at >= 4:
        (size,) = struct.unpack_from("!i", received, at)
        if len(received) - at - 4 < size:
            break
        messages.append(pickle.loads(received[at + 4:at + 4 + size]))
        at += 4 + size
    del received[:at]
    return messages


def receive_quiet(fd: int, received: bytearray) -> list[tuple[int, tuple]]:
    """Parent side: the messages waiting in a child's quiet pipe (``fd``, non-blocking),
    read without waiting, each as (main-pipe messages sent before it, message); [] when
    there are none or the child is gone."""
    if fd < 0:
        return []
    try:
        while chunk := os.read(fd, 1 << 16):
            received += chunk
    except BlockingIOError:
        pass
    except OSError:
        return []
    messages, at = [], 0
    while len(received) - at >= QUIET_HEADER.size:
        size, before = QUIET_HEADER.unpack_from(received, at)
        start = at + QUIET_HEADER.size
        if len(received) - start < size:
            break
        messages.append((before, pickle.loads(received[start:start + size])))
        at = start + size
    del received[:at]
    return messages


def in_order(held: list, main: list[tuple], read: int) -> tuple[list[tuple], int]:
    """Parent side: the quiet pipe's messages ``held`` ((main-pipe messages sent before
    it, message), in order; the ones placed are removed) and the main pipe's ``main``
    (just read, after ``read`` read before) in the order the child wrote them, and the
    main pipe's messages read then. A quiet message stays held until every main-pipe
    message written before it has been read: reading the quiet pipe first is not enough,
    a ``done`` written on the main pipe before an ``acking`` may be read after it."""
    ordered = []
    for message in main:
        while held and held[0][0] <= read:
            ordered.append(held.pop(0)[1])
        ordered.append(message)
        read += 1
    while held and held[0][0] <= read:
        ordered.append(held.pop(0)[1])
    return ordered, read


def quiet_sender(fd: int | None, send):
    """Child side: ``quiet(message)`` writes ``message`` to the quiet pipe ``fd`` (None:
    none, ``send`` takes everything), which
    the worker does not wait on (runs/worker/handoff.py): a write there wakes nobody, so
    the child is not preempted by its worker at every ack (a write to the main pipe cost
    the child about 150 µs on 2 cores). Each frame carries ``send.sent`` (main-pipe
    messages sent before it, under the send lock), by which the worker puts it back in
    the order the two were written in (in_order). A message over QUIET_MAX bytes, or one
    pickle refuses, goes through ``send`` (the main pipe) instead: then every later
    message of the same ack must too (``main=True``), or it would be read first. Returns
    "quiet" or "main" (where it went), or False (``send``'s fallback went instead)."""

    def quiet(message, main: bool = False) -> str | bool:
        if fd is None:  # no quiet pipe: everything goes the main way
            return send(message) and "main"
        try:
            data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        except Exception:  # noqa: BLE001 - send's fallback names the result
            return send(message) and "main"
        if main or len(data) + QUIET_HEADER.size > QUIET_MAX:
            return send(message) and "main"
        with send.lock:
            os.write(fd, QUIET_HEADER.pack(len(data), send.sent[0]) + data)
        return "quiet"

    return quiet


def message_sender(conn):
    """Child side: ``send(message)`` over ``conn`` with plain pickle (True: sent as
    given; False: a ``done`` or ``acking`` whose result pickle refused went as a
    ``done`` failure instead): Connection.send's
    ForkingPickler copies the copyreg dispatch table on every call, a cost paid per run
    (BENCHMARKS.md); messages between worker and child hold only builtins and datetimes.
    ``send.lock`` (an RLock, held while sending) keeps messages from the child's threads
    whole and in order."""
    lock = threading.RLock()

    def send(message) -> bool:
        sent = True
        try:
            data = pickle.dumps(message, pickle.HIGHEST_PROTOCOL)
        except Exception as exc:  # noqa: BLE001 - a result JSON took but pickle cannot
            if message[0] not in ("done", "acking"):
                raise
            sent = False
            # e.g. nested deeper than pickle's recursion allows, or an instance of a
            # local dict subclass: a failure naming the result, not a dead child.
            _, run_id, attempt, _, _, _, logs, began, finished, _ = message
            error = f"the handler's result cannot be sent to the worker: {exc!r}"[:10_000]
            data = pickle.dumps(("done", run_id, attempt, False, None, error, logs, began,
                                 finished, None), pickle.HIGHEST_PROTOCOL)
        with lock:
            conn.send_bytes(data)
            sent_count[0] += 1
        return sent

    sent_count = [0]
    send.lock = lock
    send.sent = sent_count  # messages sent so far (quiet_sender stamps its own with it)
    return send

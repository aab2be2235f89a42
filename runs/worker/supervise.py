"""Deadlines and heartbeats: the worker waits on its children and lanes, handles what
the children send (outcomes, streamed log lines, heartbeats), cuts off a run past its
``timeout_s``, replaces a child that died, and extends the leases it holds every
heartbeat interval (docs/architecture.md, "runworker").
"""

import logging
import time
from collections.abc import Callable
from multiprocessing.connection import wait

from runs.daemons.daemon import TRANSIENT
from runs.models import AttemptOutcome
from runs.types import Outcome
from runs.worker import recycle
from runs.worker.cancels import cancelled_outcome
from runs.worker.pool import STALL_S, Slot, streamed_logs
from scheduler_core import conf

# Longest wait between two reads of a child's quiet pipe while it may ack: what it said
# of its acks (the run it continued, whose timeout the worker then keeps) is that late.
CHILD_ACKS_READ_S = 0.05

log = logging.getLogger("scheduler.worker")


class Supervisor:
    """The worker's watch over its children: wait for them and the lanes (wait_timeout,
    collect), their messages (handle_message), their deadlines and deaths
    (enforce_deadlines, child_died) and the leases' heartbeat (heartbeat_if_due). Owns
    when the last heartbeat was (``last_heartbeat``). Outcomes go to ``acks``, ack
    messages to ``child_acks``, cancels past their grace to ``cancels``, recycling to
    ``recycler``; the runs a replaced child had not started go back to ``ahead``. Called
    by the Worker's round; Shutdown has the children's last messages handled here."""

    def __init__(self, config, broker, lanes, children, ahead, lease, acks, child_acks,
                 cancels, recycler, register: Callable[[], None], note_failure: Callable):
        self.config = config
        self.broker = broker
        self.lanes = lanes
        self.children = children
        self.ahead = ahead
        self.lease = lease
        self.acks = acks
        self.child_acks = child_acks
        self.cancels = cancels
        self.recycler = recycler
        self.register = register
        self.note_failure = note_failure
        self.last_heartbeat = time.monotonic()

    def wait_timeout(self) -> float:
        """Seconds to wait for a child or a lane: short while a slot is free (so leasing
        resumes soon), never past the nearest deadline, nor past the moment a run with
        others waiting behind it goes long (LeaseAhead.take_back_stalled)."""
        busy = self.children.in_flight()
        timeout = self.config.poll_s if len(busy) < len(self.children.slots) else 0.5
        if busy and self.child_acks.enabled:
            # Its child's acks are read at the next round (handoff.py, the quiet pipe).
            timeout = min(timeout, CHILD_ACKS_READ_S)
        wake_at = self.lease.sleeping_until()
        if wake_at is not None:
            timeout = min(timeout, wake_at - time.monotonic())
        if busy:
            now = time.monotonic()
            timeout = min(timeout, min(min(r.deadline, r.cancel_deadline)
                                       for s in busy for r in s.executing()) - now,
                          self.cancels.due_in(now))
            stalls = [wait for s in busy
                      if len(s.queued) > 1 and (wait := s.current.began + STALL_S - now) > 0]
            timeout = min([timeout, *stalls])
        return max(0.0, timeout)

    def collect(self, timeout: float) -> None:
        """Wait up to ``timeout`` seconds for a child's message or a lane's answer, and
        handle the children's messages."""
        busy = {slot.conn: slot for slot in self.children.in_flight()}
        ready = wait([*busy, self.lanes.wake_fd], timeout)
        for conn in ready:
            if conn == self.lanes.wake_fd:
                self.lanes.drain_wakeups()
                continue
            slot = busy[conn]
            try:
                messages = slot.receive()
            except (EOFError, OSError):
                self.child_died(slot)
                continue
            for message in messages:
                self.handle_message(slot, message)
        for conn, slot in busy.items() if self.child_acks.enabled else ():
            if conn not in ready:
                # What its child said of its own acks, which wakes nobody (handoff.py).
                for message in slot.receive_quiet():
                    self.handle_message(slot, message)
        self.recycler.recycle_children()
        self.lease.dispatch()
        # Right after the hand: a continued run handed now may end before the next round.
        self.child_acks.allow()

    def handle_message(self, slot: Slot, message: tuple) -> None:
        kind, run_id = message[0], message[1]
        current = slot.current
        if current is None or current.lease.run_id != run_id:
            current = slot.running.get(run_id)  # an async run's (async_hand.py)
            if current is None:
                return
        if kind == "log":
            current.logs = (current.logs or []) + message[2]
            current.dropped = message[3]
            return
        if not current.is_async and self.child_acks.child_message(slot, current, message):
            return
        if kind == "heartbeat":
            try:
                held = self.broker.heartbeat([current.lease])
            except TRANSIENT as exc:
                # The messages read with this one must still be handled (their outcomes
                # would be lost); heartbeat_if_due extends the lease in time anyway.
                self.note_failure("heartbeat", exc)
                return
            if held:
                current.lease = held[0]
            else:
                current.lost = True
            return
        if kind == "timed_out":  # an async run its loop cut off (child_async.py)
            _, _, _, error, logs, began, finished = message
            ok, result, retry = False, None, None
        else:
            _, _, attempt, ok, result, error, logs, began, finished, retry = message
        if current.logs:
            logs = current.logs + logs
        took = finished - began
        if current.cancel_deadline != float("inf"):
            self.acks.add(cancelled_outcome(current, logs, "the handler stopped"))
        else:
            self.acks.add(Outcome(
                lease=current.lease,
                outcome=(AttemptOutcome.TIMED_OUT if kind == "timed_out" else
                         AttemptOutcome.SUCCEEDED if ok else AttemptOutcome.FAILED),
                result=result, error=error, logs=logs, took_s=took, retry=retry,
                task=current.task, watched=current.watched,
            ))
        if current.is_async:
            self.lease.async_room.note_time(took)
            slot.finish_async(run_id)
            return
        self.children.note_run_time(took)
        slot.pop_finished()
        # The next run in the pipe started when this one finished (same monotonic clock).
        slot.begin_head(finished)

    def replace(self, slot: Slot) -> None:
        """Replace ``slot``'s child; the runs it had not started go back ahead."""
        self.ahead.requeue(self.children.restart(slot))
        self.child_acks.allow()  # runs wait ahead now: no child may jump them

    def child_died(self, slot: Slot) -> None:
        # Outcomes the child sent before it died may still be in the pipe: read them
        # first, so the run it died in, not one it finished, is the one marked crashed.
        try:
            while (slot.queued or slot.running) and slot.conn.poll():
                for message in slot.receive():
                    self.handle_message(slot, message)
        except (EOFError, OSError):
            pass
        if slot.current is not None and slot.current.pending is not None:
            self.child_acks.ack_pending_and_restart(slot, "died")
            return
        current = slot.current
        if current is None:
            if slot.running:
                log.warning("worker: child running %d async runs died; restarting it",
                            len(slot.running))
            self.children.restart(slot)
            return
        slot.process.join(1)
        code = slot.process.exitcode
        if current.cancel_deadline != float("inf"):
            self.acks.add(cancelled_outcome(
                current, streamed_logs(current), f"its process exited ({code})"))
            self.replace(slot)
            return
        self.acks.add(Outcome(
            lease=current.lease, outcome=AttemptOutcome.CRASHED,
            error=f"the worker's child process died (exit code {code}) while running the run",
            logs=streamed_logs(current), took_s=time.monotonic() - current.began,
            task=current.task,
        ))
        log.warning("worker: child running run %s died (exit code %s); restarting it",
                    current.lease.run_id, code)
        self.replace(slot)

    def enforce_deadlines(self) -> None:
        for slot in [s for s in self.children.slots if s.lock_lost]:
            log.warning("worker: a child died holding its control lock; replacing it")
            self.child_died(slot)
        now = time.monotonic()
        for slot in self.children.in_flight():
            current = slot.current
            if not slot.process.is_alive():
                self.child_died(slot)
            elif self.async_overdue(slot, now) or current is None:
                pass
            elif now >= current.cancel_deadline:
                self.cancels.expired(slot)
            elif now >= current.deadline and current.pending is not None:
                self.child_acks.ack_pending_and_restart(
                    slot, f"did not return from the ack in {conf.get('LEASE_TTL_S')} s")
            elif now >= current.deadline:
                log.warning("worker: run %s exceeded timeout_s=%s; cutting it off",
                            current.lease.run_id, current.timeout_s)
                self.acks.add(Outcome(
                    lease=current.lease, outcome=AttemptOutcome.TIMED_OUT,
                    error=f"timed out after {current.timeout_s} s; the handler was cut off",
                    logs=streamed_logs(current), took_s=now - current.began,
                    task=current.task,
                ))
                self.replace(slot)
        self.record_orphans()

    def async_overdue(self, slot: Slot, now: float) -> bool:
        """If an async run of ``slot`` is past its deadline (its timeout and KILL_AFTER_S:
        it blocks its child's loop) or a cancel's grace, kill the child (True): that run
        ends timed out or cancelled, the child's other runs crashed (record_orphans)."""
        late = [run for run in slot.running.values()
                if now >= min(run.deadline, run.cancel_deadline)]
        if not late:
            return False
        run = slot.running.pop(late[0].lease.run_id)
        if now >= run.cancel_deadline:
            outcome = cancelled_outcome(run, streamed_logs(run), "the handler did not "
                                        "stop in time and its child was killed")
        else:
            outcome = Outcome(
                lease=run.lease, outcome=AttemptOutcome.TIMED_OUT,
                error=f"timed out after {run.timeout_s} s; the handler did not stop when "
                      "cancelled (it blocks the event loop?) and its child was killed",
                logs=streamed_logs(run), took_s=now - run.began, task=run.task)
        self.acks.add(outcome)
        log.warning("worker: async run %s did not stop at its %s; killing its child",
                    run.lease.run_id, "cancel" if outcome.outcome == AttemptOutcome.CANCELLED
                    else f"timeout_s={run.timeout_s}")
        current = slot.current
        if current is not None and current.pending is not None:
            self.child_acks.ack_pending_and_restart(slot, "was killed for an async run")
            return True
        if current is not None:
            self.acks.add(Outcome(
                lease=current.lease, outcome=AttemptOutcome.CRASHED,
                error=f"its child process was killed: async run {run.lease.run_id} "
                      "blocked the child's event loop", logs=streamed_logs(current),
                took_s=now - current.began, task=current.task))
        self.replace(slot)
        return True

    def record_orphans(self) -> None:
        """Record the runs cut off by their child's death or replacement (its async runs,
        and any run it had started whose outcome was never read): crashed (cancelled if
        they were being cancelled)."""
        for run in self.children.orphans:
            if run.cancel_deadline != float("inf"):
                self.acks.add(cancelled_outcome(run, streamed_logs(run),
                                                "its child process was stopped"))
                continue
            where = "on its event loop" if run.is_async else "before its outcome was read"
            self.acks.add(Outcome(
                lease=run.lease, outcome=AttemptOutcome.CRASHED,
                error="the worker's child process died or was replaced while the run ran "
                      f"{where}", logs=streamed_logs(run),
                took_s=time.monotonic() - run.began, task=run.task))
        self.children.orphans.clear()

    def heartbeat_if_due(self) -> None:
        if time.monotonic() - self.last_heartbeat < self.config.heartbeat_s:
            return
        self.last_heartbeat = time.monotonic()
        self.register()
        recycle.flush_counts(self.config.using)
        live = [run for run in self.children.handed() if not run.lost]
        if not live and not len(self.ahead):
            return
        held = {(le.run_id, le.attempt): le for le in self.broker.heartbeat(
            [c.lease for c in live] + self.ahead.leases())}
        for run_id in self.ahead.renew(held):
            log.warning("worker: lease on run %s lost before it started; dropped", run_id)
        for current in live:
            key = (current.lease.run_id, current.lease.attempt)
            if key in held:
                current.lease = held[key]
            elif current.pending is not None:
                current.lost = True  # its child's ack has committed: nothing is lost
            else:
                current.lost = True
                log.warning("worker: lease on run %s lost; its outcome will be refused",
                            current.lease.run_id)

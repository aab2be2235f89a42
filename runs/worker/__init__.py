"""The worker daemon (``runworker``): a Worker that owns and wires one object per concern,
each in its module:

- main.py: the Worker, its round and its Daemon hooks;
- config.py: what it was started with (WorkerConfig);
- pool.py: the child processes (Children, one Slot each) and the runs handed to each
  (InFlight);
- child.py: what runs in a child process (handlers, log capture);
- child_async.py: a child's event loop, which runs the async handlers' runs;
- results.py: whether a handler's result can be stored;
- wire.py: what crosses the pipe between the worker and a child, and its framing;
- ahead.py: the runs leased ahead (Ahead, one Leased each);
- lease_ahead.py: leasing, handing out and taking back (LeaseAhead);
- async_hand.py: leasing for and handing out the async handlers' runs;
- acks.py: acking outcomes in batches (Acks);
- child_acks.py: the worker's side of acks made in its children (ChildAcks, BookKeeper);
- handoff.py: the child's side of those acks;
- supervise.py: waiting on the children, deadlines, dead children, heartbeats (Supervisor);
- cancels.py: stopping the handler of a cancelled run (Cancels);
- recycle.py: replacing a child after so many runs or past a memory cap (Recycler);
- shutdown.py: a graceful and a forced stop (Shutdown);
- lanes.py: the background threads that run leases and acks.

docs/architecture.md ("runworker") describes how they fit together.
"""

from runs.worker.acks import ACK_BATCH_MAX
from runs.worker.lease_ahead import Leased, lease_batch
from runs.worker.main import Worker
from runs.worker.pool import STALL_S, InFlight, Slot

__all__ = ["ACK_BATCH_MAX", "STALL_S", "InFlight", "Leased", "Slot", "Worker", "lease_batch"]

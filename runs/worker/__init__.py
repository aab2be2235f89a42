"""The worker daemon (``runworker``), one concern per module:

- main.py: the Worker, its state and its round;
- pool.py: the pool of child processes (Slot) and the runs handed to each (InFlight);
- child.py: what runs in a child process (handlers, log capture);
- wire.py: what crosses the pipe between the worker and a child, and its framing;
- lease_ahead.py: how many runs to lease ahead, handing them out, taking them back;
- acks.py: acking outcomes in batches;
- supervise.py: waiting on the children, deadlines, dead children, heartbeats;
- recycle.py: replacing a child after so many runs or past a memory cap;
- shutdown.py: a graceful and a forced stop;
- lanes.py: the background threads that run leases and acks.

docs/architecture.md ("runworker") describes how they fit together.
"""

from runs.worker.acks import ACK_BATCH_MAX
from runs.worker.lease_ahead import Leased, lease_batch
from runs.worker.main import Worker
from runs.worker.pool import STALL_S, InFlight, Slot

__all__ = ["ACK_BATCH_MAX", "STALL_S", "InFlight", "Leased", "Slot", "Worker", "lease_batch"]

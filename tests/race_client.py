"""A racing dispatcher-and-worker for the contract suite, run as a separate process:
``python -m tests.race_client SECONDS BATCH`` promotes and leases from the configured
broker until SECONDS have passed and nothing was left for a while, then prints the leased
run ids as one JSON list."""

import json
import os
import sys
import time

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings")
    django.setup()
    from runs.brokers import get_broker

    seconds, batch = float(sys.argv[1]), int(sys.argv[2])
    broker = get_broker()
    worker_id = f"racer-{os.getpid()}"
    leased: list[int] = []
    deadline = time.monotonic() + seconds
    idle_since = time.monotonic()
    while time.monotonic() < deadline or time.monotonic() - idle_since < 1.0:
        broker.promote()
        got = broker.lease(["default"], batch, worker_id)
        leased += [lease.run_id for lease in got]
        if got:
            idle_since = time.monotonic()
            time.sleep(0.005)  # hand the runs to "work", as a worker would
        elif time.monotonic() > deadline:
            time.sleep(0.05)
    print(json.dumps(leased))


if __name__ == "__main__":
    main()

"""A racing dispatcher-and-worker for the contract suite, run as a separate process:
``python -m tests.race_client SECONDS BATCH [START_AT]`` promotes and leases from the
configured broker until SECONDS have passed and nothing was left for a while, then prints
the leased run ids as one JSON list. START_AT (Unix seconds) makes every racer begin at the
same instant, whatever their start-up times; START_AT "-" makes it print "ready" once
connected and begin when a line arrives on its stdin (the caller's starting gun, for start-up
times no instant chosen beforehand can cover on a loaded machine)."""

import json
import os
import sys
import time

import django


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "scheduler_project.settings_chaos")
    django.setup()
    from runs.brokers import get_broker

    seconds, batch = float(sys.argv[1]), int(sys.argv[2])
    broker = get_broker()
    broker.ping()  # connect before the start line
    if len(sys.argv) > 3 and sys.argv[3] == "-":
        print("ready", flush=True)
        sys.stdin.readline()
    elif len(sys.argv) > 3:
        time.sleep(max(float(sys.argv[3]) - time.time(), 0))
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

"""A workflow run's life on the run engine (docs/workflows.md): a node run's ack, told by
the listener (listener.py): its success (ack.py) and failure (failures.py); the engine's
forward steps they take (engine.py); the same success ack in one call on PostgreSQL
(ack_pg.py with workflows/sql/), trigger rules (rules.py), mapped nodes
(fanout.py, items.py), sub-workflow nodes (subflows.py, subflow_starts.py,
subflow_refs.py, reached through nesting.py), a node's trace context, and the owner's
quota of pending runs. What a node's handler reads of its upstream nodes is the
public workflows/context.py."""

"""A workflow run's life on the run engine (docs/workflows.md): the engine's forward
steps (engine.py) told of each node run's ack by the listener (listener.py), the one-call
ack on PostgreSQL (ack_pg.py with workflows/sql/), trigger rules (rules.py), mapped nodes
(fanout.py, items.py), sub-workflow nodes (subflows.py, subflow_starts.py,
subflow_refs.py, reached through nesting.py), failures, a node's trace context, and the
owner's quota of pending runs. What a node's handler reads of its upstream nodes is the
public workflows/context.py."""

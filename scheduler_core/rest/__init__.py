"""The REST foundation every app's API builds on (docs/architecture.md, "Code layout and
dependency rule"): the views' policy (view_defaults: tokens, sessions, throttling, the
capped JSON parser), who may see whose rows (permissions), the strict query parameters,
ordering and fields, the owner-scoped cursor pagination (owner_lists) and the error
answers with their OpenAPI shapes (errors). It lives below runs and jobs so that each app
serves the API of its own models, and imports neither."""

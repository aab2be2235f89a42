"""The REST API's settings for Django REST framework and drf-spectacular, for this
checkout's project and for a project of your own (docs/own-project.md, "Settings").
Strings only: this module imports nothing of the apps, so settings.py can import it.

The API's views name their own authentication, permission, throttles and parser
(scheduler_core/rest/view_defaults.py), so of ``REST_FRAMEWORK`` they need only what
drf-spectacular's install asks of every project: its schema class as DEFAULT_SCHEMA_CLASS (without
it ``/api/schema/`` fails, "Incompatible AutoSchema"). ``SPECTACULAR_SETTINGS``: the
schema's title, description and enum names, and the Swagger UI's assets served from the
installed drf-spectacular-sidecar (the app ``drf_spectacular_sidecar`` in INSTALLED_APPS)
instead of an unpinned ``@latest`` bundle from a public CDN: /api/docs/ works offline.
"""

REST_FRAMEWORK = {"DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema"}

SPECTACULAR_SETTINGS = {
    "TITLE": "Job scheduler API",
    "DESCRIPTION": (
        "Jobs (one-off and cron), their runs, attempts and logs, the dead letter, queue "
        "figures, and workflows (graphs of jobs) with their runs. Authenticate with "
        "`Authorization: Token <key>` (manage.py createapitoken USER) or a session. You see "
        "your own jobs, runs and workflows only; other owners' need Django's "
        "model permissions (view_job, change_job, view_run, change_run, and the workflows' "
        "view_workflow, change_workflow, view_workflowrun, change_workflowrun). See "
        "docs/api.md."
    ),
    "VERSION": "1.0.0",
    "SERVE_INCLUDE_SCHEMA": False,
    "SERVE_PERMISSIONS": ["scheduler_core.rest.throttling.IsAuthenticatedOrThrottled"],
    "COMPONENT_SPLIT_REQUEST": True,
    "SWAGGER_UI_DIST": "SIDECAR",
    "SWAGGER_UI_FAVICON_HREF": "SIDECAR",
    "REDOC_DIST": "SIDECAR",
    # The default hook (named enums) and the old job field names marked deprecated.
    "POSTPROCESSING_HOOKS": [
        "drf_spectacular.hooks.postprocess_schema_enums",
        "jobs.api.old_names.mark_deprecated_in_schema",
    ],
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "runs.models.RunState",
        # A workflow's status has the same choices (active, paused, cancelled): one enum.
        "JobStatusEnum": "jobs.models.Job.Status",
        "MisfirePolicyEnum": "jobs.models.MisfirePolicy",
        "AttemptOutcomeEnum": "runs.models.AttemptOutcome",
        "WorkflowRunStateEnum": "workflows.models.WorkflowRunState",
        "NodeStateEnum": "workflows.models.NodeState",
        "JobShownStatusEnum": "jobs.lifecycle.SHOWN_STATUSES",
    },
}

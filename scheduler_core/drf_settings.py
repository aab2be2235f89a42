"""The REST API's Django REST framework and drf-spectacular settings, for this checkout's
project and for a project of your own (docs/own-project.md, "Settings"). Strings only:
this module imports nothing of the apps, so settings.py can import it.

The API's views rely on these defaults rather than naming their own classes: the token
authentication (``Authorization: Token <key>``, jobs/tokens.py), owner isolation's
permission and the API's throttles (docs/isolation.md), the JSON parser that caps a
body's size (docs/api.md, "Limits"), django-filter and the OpenAPI schema class. A
project whose other APIs want other defaults keeps its own and merges these in:
``REST_FRAMEWORK = {**drf_settings.REST_FRAMEWORK, **mine}`` gives yours precedence, so
check the API's keys (above) are still these.
"""

REST_FRAMEWORK = {
    "DEFAULT_AUTHENTICATION_CLASSES": [
        "jobs.tokens.TokenAuthentication",
        "rest_framework.authentication.SessionAuthentication",
    ],
    "DEFAULT_PERMISSION_CLASSES": ["jobs.throttling.IsAuthenticatedOrThrottled"],
    "DEFAULT_SCHEMA_CLASS": "drf_spectacular.openapi.AutoSchema",
    "DEFAULT_FILTER_BACKENDS": ["django_filters.rest_framework.DjangoFilterBackend"],
    "DEFAULT_PARSER_CLASSES": ["jobs.parsers.CappedJSONParser"],
    "DEFAULT_THROTTLE_CLASSES": ["jobs.throttling.OwnerRateThrottle",
                                 "jobs.throttling.AnonymousRateThrottle"],
    # How many reverse proxies in front set X-Forwarded-For (the anonymous throttle's
    # client address): this checkout's settings take it from TRUSTED_PROXY_COUNT.
    "NUM_PROXIES": 0,
}

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
    "SERVE_PERMISSIONS": ["jobs.throttling.IsAuthenticatedOrThrottled"],
    "COMPONENT_SPLIT_REQUEST": True,
    "ENUM_NAME_OVERRIDES": {
        "RunStateEnum": "runs.models.RunState",
        "JobStatusEnum": "jobs.models.Job.Status",
        "MisfirePolicyEnum": "jobs.models.MisfirePolicy",
        "AttemptOutcomeEnum": "runs.models.AttemptOutcome",
        "WorkflowStatusEnum": "workflows.models.Workflow.Status",
        "WorkflowRunStateEnum": "workflows.models.WorkflowRunState",
        "NodeStateEnum": "workflows.models.NodeState",
        "JobShownStatusEnum": "jobs.lifecycle.SHOWN_STATUSES",
    },
}

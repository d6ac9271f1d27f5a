"""HTTP: webhooks (SPEC 11.2) and the dashboard (SPEC 11.3), on one Starlette app."""

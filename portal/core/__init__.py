"""The infrastructure the apps stand on (docs/architecture.md, "Floors"): queueing
by task name, storage paths, errors, throttles, caches, CPU lists, admin helpers,
the deployment checks and the migrations' grants. Imports no app."""

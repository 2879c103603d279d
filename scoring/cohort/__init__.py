"""A run's input: staging the cohort into the folder a scored container sees
(``staging``), and the verification sets prepared ahead of need on the builds side
(``verifysets``), re-encoded by ``rewrite``. Above the engine only; talks to no engine."""

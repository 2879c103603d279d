"""Podium's pure policy: the rules the portal, the worker side and the client must word
and decide alike, on plain values. ``archives``: what an uploaded archive may hold and how
it is unpacked; ``dockerfile_policy``: what an environment's Dockerfile may do;
``verdict``: the verdict of a scored run (the scoring host's, and ``podium run --local``'s).

Every module here imports the standard library and this package alone (import-linter's
contract "The pure policy imports no framework and none of Podium's other packages"), so
that the client can import it as the server does, and a rule is written once.
"""

"""gunicorn's settings for Podium's web process, read from the working directory by every
``gunicorn portal.wsgi`` of the project (the Procfile, compose.yaml's web service, the
image's command, bench/web.py). The number of workers and threads stays on each command
line.

``keepalive = 0``: each connection is closed after its response. With keep-alive a
client's connection stays with the worker process that accepted it, so a few busy
clients (or a proxy's pool of upstream connections) can all land on one process, which
serves them on one core (one thread at a time runs Python) while the other process idles.
bench/web.py measured it: the signed-in every-attempt page served about 200 requests a
second when wrk's 16 connections were spread over the two workers and 107 when all 16
had landed on one; without keep-alive every run served 176 to 199, since each request goes
to whichever process accepts it first.
"""

keepalive = 0

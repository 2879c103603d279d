#!/bin/sh
# The submission build: Podium runs this with /bin/sh inside your environment image,
# in /submission (your archive, unpacked), with no cohort image in sight. Its result
# becomes the image that is scored; /submission/run must be executable in it.
# It runs inside your charged attempt: keep heavy installs in the Dockerfile.
set -eu

chmod 0755 run
# Byte-compile ahead of time: the scoring sandbox's root filesystem is read-only, and
# whatever Python compiles at run time is on the clock.
python3 -m compileall -q predict.py
# Fail here, not in the timed run, if the model cannot even be imported.
python3 -c 'import predict' >/dev/null
echo "build.sh: ready"

#!/bin/sh
# The submission build: Podium runs this with /bin/sh inside the environment image, in
# /submission (this archive, unpacked), with no cohort image in sight. It runs inside the
# charged attempt: the heavy work (timm, the checkpoint) is in the Dockerfile.
set -eu

chmod 0755 run
# Byte-compile ahead of time: the scoring sandbox's root filesystem is read-only, and
# whatever Python compiles at run time is on the clock.
python3 -m compileall -q abi.py eva02_model.py
# Fail here, not in the timed run, if the environment cannot run the model.
python3 -c 'import abi, eva02_model' >/dev/null
if [ "${EVA02_RANDOM_WEIGHTS:-0}" != 1 ] && [ ! -r "${EVA02_CHECKPOINT:-/opt/eva02/model.pt}" ]; then
    echo "build.sh: no readable checkpoint at ${EVA02_CHECKPOINT:-/opt/eva02/model.pt}" >&2
    exit 1
fi
echo "build.sh: ready"

"""The two builds (``builds``: an environment's Dockerfile, a submission's build.sh) and
what confines them: the build sandbox (``buildbox``), the build network (``buildnet``)
and its firewall rules (``egress``), and the size-capped build log (``logfile``)."""

VALID_DOCKERFILE = "FROM podium/busybox:1\nRUN true\n"

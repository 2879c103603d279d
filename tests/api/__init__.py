VALID_DOCKERFILE = "FROM localhost/podium/busybox:1\nRUN true\n"

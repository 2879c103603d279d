/*
 * A tiny submission for the arm64 scored-run test (tests/scoring/test_arm64_run.py),
 * built static for aarch64 and run as /submission/run under the native supervisor.
 *
 *   run MANIFEST IMAGE_ROOT OUTPUT
 *
 * The runtime ABI: for every manifest line ("request_id<TAB>path") it reads the image
 * at IMAGE_ROOT/path and writes one little-endian int32 (class 7, the test cohort's)
 * to OUTPUT. It says on stderr the machine the kernel (or emulator) reports, so the
 * test can tell it really ran as aarch64, and whether an AF_INET socket may be made
 * (the supervisor's seccomp filter refuses it with EAFNOSUPPORT, also to qemu acting
 * for us: network_mode=none alone would allow one), and on stdout how many rows it
 * scored. Static: it needs nothing else in the image.
 */
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <unistd.h>

#define ANSWER 7

int main(int argc, char **argv)
{
    struct utsname name;
    char line[4096], path[8192], buffer[65536];
    unsigned long rows = 0;
    int probe;
    FILE *manifest, *output, *image;
    static const unsigned char answer[4] = {ANSWER, 0, 0, 0};

    if (uname(&name) != 0) {
        perror("uname");
        return 2;
    }
    fprintf(stderr, "machine=%s\n", name.machine);
    probe = socket(AF_INET, SOCK_STREAM, 0);
    if (probe >= 0) {
        fprintf(stderr, "socket(AF_INET): made\n");
        close(probe);
    } else {
        fprintf(stderr, "socket(AF_INET): %s\n", strerror(errno));
    }
    if (argc != 4) {
        fprintf(stderr, "usage: run MANIFEST IMAGE_ROOT OUTPUT\n");
        return 2;
    }
    manifest = fopen(argv[1], "r");
    output = fopen(argv[3], "wb");
    if (manifest == NULL || output == NULL) {
        perror("open");
        return 3;
    }
    while (fgets(line, sizeof line, manifest) != NULL) {
        char *tab = strchr(line, '\t');
        if (tab == NULL)
            continue;
        tab[strcspn(tab, "\r\n")] = '\0';
        snprintf(path, sizeof path, "%s/%s", argv[2], tab + 1);
        image = fopen(path, "rb");
        if (image == NULL) {
            fprintf(stderr, "cannot read %s\n", tab + 1);
            return 3;
        }
        while (fread(buffer, 1, sizeof buffer, image) > 0)
            ;
        fclose(image);
        if (fwrite(answer, 1, sizeof answer, output) != sizeof answer) {
            perror("write");
            return 4;
        }
        rows++;
    }
    if (fclose(output) != 0) {
        perror("close");
        return 4;
    }
    printf("scored %lu rows\n", rows);
    return 0;
}

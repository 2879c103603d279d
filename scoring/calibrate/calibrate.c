/*
 * calibrate: Podium's calibration workload, a fixed amount of CPU-bound work.
 *
 *   calibrate [MANIFEST IMAGE_ROOT] OUTPUT
 *
 * Run by the trusted supervisor exactly where an entrant's /submission/run runs (the
 * same sandbox, the same clock), so its wall time is what a scored run on this host
 * would measure for the same work. The host compares the median of a few runs with
 * its hardware class's reference (scoring/calibration.py).
 *
 * Chosen for low intrinsic noise: one thread, no system call between the first
 * instruction and the last, no allocation, no file read, and a working set of 4 KiB
 * (always in L1), so the time is the latency of one long dependency chain of integer
 * multiplies, shifts and L1 loads: the core's speed, not the memory system's or the
 * kernel's. The chain cannot be vectorised or cut short by the compiler, as every step
 * needs the previous one's result. The work is fixed (ROUNDS): never tune it to a
 * machine, or the class's reference means something else.
 *
 * The result: the 32-bit checksum of the chain, little-endian, in OUTPUT (the last
 * argument). The host checks it, so a run that did not do the work cannot pass for
 * a fast one. Exit 0; 2 when OUTPUT cannot be written.
 */
#include <fcntl.h>
#include <stdint.h>
#include <unistd.h>

#define ROUNDS 180000000ULL
#define TABLE_WORDS 1024 /* 4 KiB */

static uint32_t table[TABLE_WORDS];

static uint64_t mix(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ULL;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebULL;
    x ^= x >> 31;
    return x;
}

int main(int argc, char **argv) {
    uint64_t state = 0x9e3779b97f4a7c15ULL;
    for (uint32_t i = 0; i < TABLE_WORDS; i++) {
        table[i] = (uint32_t)mix(state + i);
    }
    uint64_t acc = 0x243f6a8885a308d3ULL;
    for (uint64_t round = 0; round < ROUNDS; round++) {
        acc = mix(acc + table[acc & (TABLE_WORDS - 1)]);
        table[round & (TABLE_WORDS - 1)] ^= (uint32_t)(acc >> 32);
    }
    uint32_t checksum = (uint32_t)(acc ^ (acc >> 32));
    unsigned char bytes[4] = {
        (unsigned char)checksum,
        (unsigned char)(checksum >> 8),
        (unsigned char)(checksum >> 16),
        (unsigned char)(checksum >> 24),
    };
    if (argc < 2) {
        return 2;
    }
    int fd = open(argv[argc - 1], O_WRONLY | O_CREAT | O_TRUNC | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 || write(fd, bytes, sizeof bytes) != (ssize_t)sizeof bytes || close(fd) != 0) {
        return 2;
    }
    return 0;
}

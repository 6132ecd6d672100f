/*
 * main.c — the `ckptfs` command: argument parsing and dispatch to the
 * subcommands (commands.h) and the mount daemon (mount.h).
 */
#include "ckptfs_version.h"
#include "commands.h"
#include "container.h"
#include "mount.h"

#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static void usage(FILE *f)
{
    fprintf(f,
            "usage: ckptfs <command> [options]\n"
            "  pack [--format k15|bytesplit] [--jobs N] [--delete-source] [--force] SRC DST\n"
            "      store a model directory (or one .safetensors file) losslessly packed\n"
            "  unpack [--jobs N] DST OUT\n"
            "                        rebuild the original files from a packed directory\n"
            "  verify [--against SRC] [--jobs N] DST\n"
            "                        check every checksum (and every byte against SRC)\n"
            "  stat [--json] DST     sizes, bits per BF16 weight, escape rate, breakdowns\n"
            "  mount [-f] [-o OPTS] DST MOUNTPOINT\n"
            "                        serve the original files read-only through FUSE\n"
            "  --version             program and format versions\n");
}

static int version(void)
{
    printf("ckptfs %s\nformat %d.%d (reads %d.0-%d.%d, writes %d.%d)\n", CKPTFS_VERSION, CKP_VERSION_MAJOR,
           CKP_VERSION_MINOR, CKP_VERSION_MAJOR, CKP_VERSION_MAJOR, CKP_VERSION_MINOR, CKP_VERSION_MAJOR,
           CKP_VERSION_MINOR);
    return 0;
}

static int default_jobs(void)
{
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (int)n : 1;
}

/* --jobs N: 1..1024, or -1 after saying what is wrong. */
static int parse_jobs(const char *cmd, const char *arg)
{
    char *end;
    long j = strtol(arg, &end, 10);
    if (*end || j < 1 || j > 1024) {
        fprintf(stderr, "ckptfs %s: --jobs needs a number from 1 to 1024\n", cmd);
        return -1;
    }
    return (int)j;
}

static int cmd_pack(int argc, char **argv)
{
    ckpt_pack_opts o = {.encoding = CKC_ENC_K15, .jobs = default_jobs()};
    static const struct option lo[] = {{"format", 1, 0, 'F'}, {"jobs", 1, 0, 'j'},
                                       {"delete-source", 0, 0, 'D'}, {"force", 0, 0, 'f'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    int c;
    while ((c = getopt_long(argc, argv, "j:fh", lo, NULL)) != -1) {
        switch (c) {
        case 'F':
            if (!strcmp(optarg, "k15"))
                o.encoding = CKC_ENC_K15;
            else if (!strcmp(optarg, "bytesplit") || !strcmp(optarg, "byte-split"))
                o.encoding = CKC_ENC_BSPLIT;
            else {
                fprintf(stderr, "ckptfs pack: unknown format \"%s\" (k15 or bytesplit)\n", optarg);
                return 2;
            }
            break;
        case 'j':
            if ((o.jobs = parse_jobs("pack", optarg)) < 0)
                return 2;
            break;
        case 'D': o.delete_source = 1; break;
        case 'f': o.force = 1; break;
        case 'h': usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (argc - optind != 2) {
        usage(stderr);
        return 2;
    }
    o.src = argv[optind];
    o.dst = argv[optind + 1];
    return ckpt_pack(&o);
}

static int cmd_simple(const char *name, int argc, char **argv)
{
    const char *against = NULL;
    int json = 0, c, jobs = default_jobs();
    static const struct option lo[] = {{"against", 1, 0, 'a'}, {"json", 0, 0, 'J'}, {"jobs", 1, 0, 'j'},
                                       {"help", 0, 0, 'h'}, {0, 0, 0, 0}};
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        if (c == 'a' && !strcmp(name, "verify"))
            against = optarg;
        else if (c == 'J' && !strcmp(name, "stat"))
            json = 1;
        else if (c == 'j' && (!strcmp(name, "unpack") || !strcmp(name, "verify"))) {
            if ((jobs = parse_jobs(name, optarg)) < 0)
                return 2;
        } else if (c == 'h') {
            usage(stdout);
            return 0;
        } else {
            usage(stderr);
            return 2;
        }
    }
    int want = !strcmp(name, "unpack") ? 2 : 1;
    if (argc - optind != want) {
        usage(stderr);
        return 2;
    }
    if (!strcmp(name, "unpack"))
        return ckpt_unpack(argv[optind], argv[optind + 1], jobs);
    if (!strcmp(name, "verify"))
        return ckpt_verify(argv[optind], against, jobs);
    return ckpt_stat(argv[optind], json);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        usage(stderr);
        return 2;
    }
    const char *cmd = argv[1];
    if (!strcmp(cmd, "--version") || !strcmp(cmd, "version"))
        return version();
    if (!strcmp(cmd, "-h") || !strcmp(cmd, "--help") || !strcmp(cmd, "help")) {
        usage(stdout);
        return 0;
    }
    if (!strcmp(cmd, "pack"))
        return cmd_pack(argc - 1, argv + 1);
    if (!strcmp(cmd, "unpack") || !strcmp(cmd, "verify") || !strcmp(cmd, "stat"))
        return cmd_simple(cmd, argc - 1, argv + 1);
    if (!strcmp(cmd, "mount"))
        return ckptfs_mount_main(argc - 1, argv + 1);
    fprintf(stderr, "ckptfs: unknown command \"%s\"\n", cmd);
    usage(stderr);
    return 2;
}

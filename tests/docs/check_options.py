#!/usr/bin/env python3
"""check_options.py [--self-test] CKPTFS ROOT — the docs name the options the code has.

For every command, the options `ckptfs COMMAND --help` lists and those of
the man page's SYNOPSIS (packaging/ckptfs.1) are the same; the mount
options of `ckptfs mount -h` and the man page's MOUNT OPTIONS are the same;
and every option the README shows (`--name`, `-o` options in its commands
and option lists) is one the command accepts.  A documented option that the
code lost, or a new one nobody documented, fails.
"""
import re
import subprocess
import sys

COMMANDS = ["pack", "repack", "unpack", "verify", "stat", "mount"]


def run(ckptfs, *args):
    p = subprocess.run([ckptfs, *args], capture_output=True, text=True, timeout=30)
    return p.stdout + p.stderr


def flags(text):
    return set(re.findall(r"(?<![\w-])(--?[a-z][a-z-]*)", text))


def help_mount_options(text):
    """Names in the OPTIONS block of `ckptfs mount -h`."""
    block = text.split("OPTIONS (comma-separated):", 1)[1].split("\nTo unmount", 1)[0]
    names = set()
    for line in block.splitlines():
        m = re.match(r"  ([a-z0-9_]+(?:=[^\s,]+)?(?:, [a-z0-9_]+(?:=[^\s,]+)?)*)(?:\s|$)", line)
        if m:
            names.update(re.findall(r"([a-z0-9_]+)(?:=\S+)?", m.group(1)))
    return names


def man_sections(man):
    man = re.sub(r"\\f[A-Z]|\\-", lambda m: "-" if m.group(0) == "\\-" else "", man)
    return re.split(r"^\.SH ", man, flags=re.M), man


def man_synopsis(man):
    """{command: set of flags} from the man page's SYNOPSIS."""
    sections, _ = man_sections(man)
    syn = next(s for s in sections if s.startswith("SYNOPSIS"))
    out = {}
    for block in syn.split(".SY ckptfs")[1:]:
        cmd = re.search(r"^\.B ([a-z]+)", block, re.M)
        if cmd:
            out[cmd.group(1)] = flags(block)
    return out


def man_mount_options(man):
    sections, _ = man_sections(man)
    opts = next(s for s in sections if s.startswith("MOUNT OPTIONS"))
    names = set()
    for m in re.finditer(r"^\.TP\n(.*)$", opts, re.M):
        line = re.sub(r'"[^"]*"', " ", m.group(1))
        names.update(re.findall(r"(?<![|\w])([a-z][a-z0-9_]*)(?==|\s|$)", line.split(" ", 1)[1]))
    return names


def readme_options(readme):
    """`-o` options and --flags the README shows for `ckptfs` commands."""
    mount_opts, cmd_flags = set(), {}
    code = "\n".join(re.findall(r"^```.*?\n(.*?)^```", readme, re.M | re.S))
    for m in re.finditer(r"^ckptfs (\w+) (.*)$", code, re.M):
        cmd, rest = m.group(1), m.group(2).split("#")[0]
        cmd_flags.setdefault(cmd, set()).update(f for f in flags(rest) if f != "-o")
        for o in re.findall(r"-o (\S+)", rest):
            mount_opts.update(re.findall(r"([a-z_]+)(?:=[^,]*)?", o))
    # the option lists in the prose of the mount's own section
    mount = re.search(r"^#+ Mount.*?(?=^#)", readme, re.M | re.S)
    prose = mount.group(0) if mount else ""
    for m in re.finditer(r"`-o ([a-z_]+)", prose):
        mount_opts.add(m.group(1))
    for m in re.finditer(r"`([a-z_]+)=`", prose):
        mount_opts.add(m.group(1))
    for line in re.findall(r"fuse\.ckptfs\s+(\S+)", code):
        mount_opts.update(re.findall(r"([a-z_]+)(?:=[^,]*)?", line))
    return mount_opts, cmd_flags


def self_test(ckptfs, root):
    """Each kind of disagreement must fail the check."""
    import os
    import tempfile
    with open(f"{root}/packaging/ckptfs.1", encoding="utf-8") as f:
        man = f.read()
    with open(f"{root}/README.md", encoding="utf-8") as f:
        readme = f.read()
    mutants = {
        "a mount option missing from the man page": (man.replace(".BI cache_size= SIZE\n", ".B x\n", 1), readme),
        "a flag missing from a SYNOPSIS": (man.replace(".RB [ \\-\\-force ]\n", "", 1), readme),
        "an option the README shows and the code lacks":
            (man, readme + "\n```sh\nckptfs mount -o bogus_opt=1 P M\n```\n"),
        "a flag the README shows and the code lacks":
            (man, readme + "\n```sh\nckptfs pack --bogus-flag S P\n```\n"),
    }
    bad = []
    for what, (m, r) in mutants.items():
        if m == man and r == readme:
            bad.append(f"self-test: could not make {what}")
            continue
        with tempfile.TemporaryDirectory() as tmp:
            os.mkdir(f"{tmp}/packaging")
            with open(f"{tmp}/packaging/ckptfs.1", "w", encoding="utf-8") as f:
                f.write(m)
            with open(f"{tmp}/README.md", "w", encoding="utf-8") as f:
                f.write(r)
            if not problems_of(ckptfs, tmp):
                bad.append(f"self-test: {what} passes")
    return bad


def problems_of(ckptfs, root):
    problems = []
    with open(f"{root}/packaging/ckptfs.1", encoding="utf-8") as f:
        man = f.read()
    with open(f"{root}/README.md", encoding="utf-8") as f:
        readme = f.read()
    synopsis = man_synopsis(man)
    helps = {c: run(ckptfs, c, "--help") for c in COMMANDS}
    for c in COMMANDS:
        # the usage lines; -h/--help and -V/--version, which every command
        # takes, are in the man page's OPTIONS, not in each SYNOPSIS
        code = flags(helps[c].split("\n\n")[0]) - {"-h", "--help", "-V", "--version"}
        doc = synopsis.get(c, set())
        if code != doc:
            problems.append(f"ckptfs {c}: --help has {sorted(code - doc)} that the man page's "
                            f"SYNOPSIS lacks, the SYNOPSIS {sorted(doc - code)} that --help lacks")
    code_opts = help_mount_options(helps["mount"])
    man_opts = man_mount_options(man) - {"default_permissions"}  # accepted, implied by allow_other
    if code_opts != man_opts:
        problems.append(f"mount options: `ckptfs mount -h` has {sorted(code_opts - man_opts)} that "
                        f"the man page lacks, the man page {sorted(man_opts - code_opts)} that -h lacks")
    readme_opts, readme_flags = readme_options(readme)
    fstab_only = {"ro", "nofail", "defaults", "noauto", "user", "_netdev"}
    for o in sorted(readme_opts - code_opts - fstab_only):
        problems.append(f"README.md shows mount option '{o}', which `ckptfs mount -h` does not list")
    for c, fl in sorted(readme_flags.items()):
        if c not in helps:
            problems.append(f"README.md shows a command 'ckptfs {c}' that does not exist")
            continue
        for f in sorted(fl - flags(helps[c])):
            problems.append(f"README.md shows 'ckptfs {c} {f}', which its --help does not list")
    return problems


def main(argv):
    selftest = len(argv) == 4 and argv[1] == "--self-test"
    if len(argv) != 3 and not selftest:
        print(__doc__, file=sys.stderr)
        return 2
    ckptfs, root = argv[-2], argv[-1]
    problems = problems_of(ckptfs, root)
    if not problems and selftest:
        problems = self_test(ckptfs, root)
    for p in problems:
        print("check_options:", p, file=sys.stderr)
    if problems:
        return 1
    print(f"check_options: {len(COMMANDS)} commands' options and the mount options: --help, "
          "the man page and the README agree" + ("; each kind of disagreement fails" if selftest else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

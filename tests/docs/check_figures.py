#!/usr/bin/env python3
"""check_figures.py — every measured figure the README held stays in the docs.

The README was a guide and a lab notebook at once (816 lines at 157e8f3);
issue 24 moved its measurements to docs/*.md.  This check keeps that move
honest: figures.txt lists each figure of the README at 157e8f3 (a number with
its unit or ratio sign, a decimal, a count written with thousands separators,
either end of a range, a shape, an estimate, a number in a table row, a time
of day, a commit a measurement names) with
how often it occurred, and the check fails if README.md + docs/*.md together
hold one of them fewer times.  Figures may move and be repeated, never
disappear.  It also checks that README.md is a guide: at most 300 lines, and
its first commands are `./dev demo` and `./dev test`; and that the links of
README.md and docs/*.md lead to files and sections that exist.

  check_figures.py ROOT             check ROOT/README.md + ROOT/docs/*.md
  check_figures.py --self-test ROOT also check that deleting any one figure
                                    (every occurrence of it) fails the check
  check_figures.py --extract FILE   print the figure list of FILE (how
                                    figures.txt was made: `git show
                                    157e8f3:README.md > old.md`)
"""
import collections
import glob
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
FIGURES = os.path.join(HERE, "figures.txt")
MAX_LINES = 300
FIRST_COMMANDS = ["./dev demo", "./dev test"]

UNITS = (r"GB/s|MB/s|GiB/s|MiB/s|b/w|bits/weight|GiB|MiB|KiB|GB|MB|kB|KB|"
         r"TB|ms|s|B|%|×|x|UTC|cores?|ticks|instructions|minutes|min")
NUM = r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?"
# A number not glued to a name, a version or a path on its left; its unit,
# if any, right after it (one space allowed) and not the start of a word.
FIGURE = re.compile(
    r"(?<![\w.\-/§@:])(" + NUM + r")(?:\s?(" + UNITS + r")(?![\w/]))?(?![\w.:]\d|[\w])")
TIME = re.compile(r"(?<![\d:])(\d{2}:\d{2})(?![\d:])")
COMMIT = re.compile(r"`([0-9a-f]{7})`")


def normalize(text):
    """Join lines and collapse spaces, so rewrapped prose keeps its figures."""
    return re.sub(r"\s+", " ", text.replace("**", ""))


def blocks(text):
    """Table rows one by one, the rest as paragraphs joined into one line."""
    para = []
    for line in text.splitlines():
        if line.lstrip().startswith("|"):
            if para:
                yield False, normalize(" ".join(para))
                para = []
            yield True, normalize(line)
        elif line.strip():
            para.append(line)
        elif para:
            yield False, normalize(" ".join(para))
            para = []
    if para:
        yield False, normalize(" ".join(para))


def measured_context(block, start, end):
    """An integer without a unit that is still a figure: one end of a range
    (12–14%, 116–122 CPU ticks), a matrix shape (8192×8192), an estimate
    (~800, ≈ 5 min)."""
    before, after = block[max(0, start - 2):start], block[end:end + 2]
    return (before.endswith("–") or after.startswith("–") or
            re.match(r"×\d", after) is not None or re.search(r"\d×$", before) is not None or
            re.search(r"[~≈]\s?$", before) is not None)


def figures(text):
    """Multiset of the figures in markdown text."""
    found = collections.Counter()
    for in_table, block in blocks(text):
        for m in FIGURE.finditer(block):
            num, unit = m.group(1), m.group(2)
            if unit or in_table or "." in num or "," in num or \
                    measured_context(block, m.start(1), m.end(1)):
                found[num + (" " + unit if unit else "")] += 1
    for m in TIME.finditer(text):
        found[m.group(1)] += 1
    for m in COMMIT.finditer(text):
        found["`" + m.group(1) + "`"] += 1
    return found


def load_list(path):
    want = collections.Counter()
    with open(path, encoding="utf-8") as f:
        for line in f:
            line = line.rstrip("\n")
            if not line or line.startswith("#"):
                continue
            count, fig = line.split("\t")
            want[fig] = int(count)
    return want


def corpus(root):
    parts = [os.path.join(root, "README.md")]
    parts += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    texts = []
    for p in parts:
        with open(p, encoding="utf-8") as f:
            texts.append(f.read())
    return texts


def missing_figures(want, texts):
    have = collections.Counter()
    for t in texts:
        have.update(figures(t))
    return {fig: (n, have[fig]) for fig, n in want.items() if have[fig] < n}


def readme_problems(readme):
    problems = []
    lines = readme.splitlines()
    if len(lines) > MAX_LINES:
        problems.append(f"README.md has {len(lines)} lines (at most {MAX_LINES})")
    commands, in_code = [], False
    for line in lines:
        if line.startswith("```"):
            if in_code:
                break
            in_code = True
            continue
        if in_code and line.strip() and not line.lstrip().startswith("#"):
            commands.append(line.strip())
    firsts = [c.split("#")[0].strip() for c in commands[:2]]
    if firsts != FIRST_COMMANDS:
        problems.append(f"README.md's first commands are {firsts}, not {FIRST_COMMANDS}")
    return problems


LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def slug(heading):
    """The anchor GitHub gives a heading."""
    h = re.sub(r"[`*_]", "", heading.strip().lower())
    h = re.sub(r"[^\w\- ]", "", h)
    return h.replace(" ", "-")


def anchors(path):
    with open(path, encoding="utf-8") as f:
        return {slug(m.group(1)) for m in re.finditer(r"^#+\s+(.*)$", f.read(), re.M)}


def link_problems(root):
    """Every relative link of README.md and docs/*.md names a file that
    exists, and a #section of a markdown file one of its headings."""
    problems = []
    files = [os.path.join(root, "README.md")]
    files += sorted(glob.glob(os.path.join(root, "docs", "*.md")))
    for path in files:
        with open(path, encoding="utf-8") as f:
            text = re.sub(r"```.*?```", "", f.read(), flags=re.S)
        for m in LINK.finditer(text):
            target = m.group(1)
            if re.match(r"[a-z]+:", target):
                continue
            name, _, anchor = target.partition("#")
            dest = os.path.normpath(os.path.join(os.path.dirname(path), name)) if name else path
            where = os.path.relpath(path, root)
            if not os.path.exists(dest):
                problems.append(f"{where}: link to {target}: no such file")
            elif anchor and dest.endswith(".md") and anchor not in anchors(dest):
                problems.append(f"{where}: link to {target}: no such section")
    return problems


def check(root, want):
    texts = corpus(root)
    problems = readme_problems(texts[0]) + link_problems(root)
    for fig, (n, h) in sorted(missing_figures(want, texts).items()):
        problems.append(f"figure '{fig}': {n}x in the README at 157e8f3, "
                        f"{h}x in README.md + docs/*.md")
    return problems


def self_test(root, want):
    """The check must fail when a figure is deleted from the docs, when the
    README grows past MAX_LINES and when its first commands change."""
    texts = corpus(root)
    if missing_figures(want, texts) or readme_problems(texts[0]):
        return ["self-test needs a passing tree"]
    bad = []
    readme = texts[0]
    if not readme_problems(readme + "\n" * (MAX_LINES + 1)):
        bad.append(f"a README of over {MAX_LINES} lines passes")
    swapped = readme.replace(FIRST_COMMANDS[0], "./dev tmp", 1)
    swapped = swapped.replace(FIRST_COMMANDS[1], FIRST_COMMANDS[0], 1)
    if not readme_problems(swapped):
        bad.append("a README whose first commands are not the two passes")
    if not readme_problems("```sh\nmake\n```\n" + readme):
        bad.append("a README with another command first passes")
    with tempfile.TemporaryDirectory() as tmp:
        os.mkdir(os.path.join(tmp, "docs"))
        with open(os.path.join(tmp, "README.md"), "w", encoding="utf-8") as f:
            f.write("[a](docs/a.md#there) [b](docs/b.md)\n")
        with open(os.path.join(tmp, "docs", "a.md"), "w", encoding="utf-8") as f:
            f.write("# A\n\n## Not there\n")
        if len(link_problems(tmp)) != 2:
            bad.append("a link to a missing file or section passes")
    per_text = [figures(t) for t in texts]
    for fig in want:
        # remove every occurrence of this figure (with its unit) everywhere
        num = fig.split(" ")[0]
        unit = fig[len(num):].strip()
        if fig.startswith("`"):
            pat = re.compile(re.escape(fig))
        else:
            pat = re.compile(r"(?<![\w.\-/§@:])" + re.escape(num) +
                             (r"\s?" + re.escape(unit) if unit else "") +
                             r"(?![\w.:]\d|[\w])")
        have = collections.Counter()
        for t, counted in zip(texts, per_text):
            cut = pat.sub("", t)
            have.update(counted if cut == t else figures(cut))
        if have[fig] >= want[fig]:
            bad.append(f"deleting figure '{fig}' does not fail the check")
    return bad


def main(argv):
    if len(argv) == 3 and argv[1] == "--extract":
        with open(argv[2], encoding="utf-8") as f:
            found = figures(f.read())
        print("# figures of README.md at 157e8f3: count<TAB>figure "
              "(tests/docs/check_figures.py --extract)")
        for fig, n in sorted(found.items()):
            print(f"{n}\t{fig}")
        return 0
    if len(argv) == 3 and argv[1] == "--self-test":
        root, selftest = argv[2], True
    elif len(argv) == 2:
        root, selftest = argv[1], False
    else:
        print(__doc__, file=sys.stderr)
        return 2
    want = load_list(FIGURES)
    problems = check(root, want)
    if not problems and selftest:
        problems = self_test(root, want)
    for p in problems:
        print("check_figures:", p, file=sys.stderr)
    if problems:
        print(f"check_figures: {len(problems)} problem(s)", file=sys.stderr)
        return 1
    print(f"check_figures: {sum(want.values())} figures ({len(want)} distinct) "
          f"of the README at 157e8f3 all found in README.md + docs/*.md"
          + ("; deleting any one fails the check" if selftest else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))

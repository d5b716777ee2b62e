#!/usr/bin/env python3
"""The documents against the repository (run by CTest as `docs`):

1. Invariants: every numbered invariant label (WG-1, FS-3, ...) that the code cites is defined
   in exactly one header (a comment line that starts with the label, after an optional "- " or
   "Word ("), and ARCHITECTURE.md's invariant index lists exactly those labels, each with the
   header that defines it.
2. Paths: every repository path that ARCHITECTURE.md, README.md or BENCHMARKS.md cites (in
   backquotes or as a link) exists.
3. README snippets: every fenced block in README.md is preceded by a marker comment:
     <!-- example: PATH -->         the block is the whole file PATH, byte for byte;
     <!-- excerpt: PATH -->         the block's non-blank lines appear in PATH in that order
                                    (leading and trailing spaces aside);
     <!-- run-by: PATH[, PATH...] --> shell commands run by those tests: each option (--x)
                                    written before a `--` separator appears in one of them;
     <!-- not-run: REASON -->       listed on stdout, so that what no test runs stays visible.

Usage: docs_test.py REPOSITORY_ROOT. Exits 1 listing every problem found.
"""

import pathlib
import re
import sys

LABEL = re.compile(r"\b([A-Z]{2,5})-([0-9]+)\b")
# Prefix-number words that are not invariants.
NOT_INVARIANTS = {"UTF", "SHA", "CVE", "RFC", "ISO", "AES", "HMAC"}
CODE_DIRS = ["src", "include", "python", "tests", "bench", "fuzz", "examples"]
CODE_SUFFIXES = {".h", ".cc", ".py", ".sh"}
PATH_ROOTS = ("src/", "include/", "tests/", "python/", "bench/", "scripts/", "examples/",
              "cmake/", "fuzz/", ".ci/")
ROOT_FILES = re.compile(r"^[A-Z][A-Za-z_]*\.(md|txt)$")  # README.md, CMakeLists.txt, ...
DOCUMENTS = ["ARCHITECTURE.md", "README.md", "BENCHMARKS.md"]


def code_files(root):
    for d in CODE_DIRS:
        for p in sorted((root / d).rglob("*")):
            if p.is_file() and p.suffix in CODE_SUFFIXES:
                yield p


def labels_in(text):
    return {m.group(0) for m in LABEL.finditer(text) if m.group(1) not in NOT_INVARIANTS}


def definition_pattern(label):
    return re.compile(r"^\s*(//|#)\s*(-\s*)?(\w+\s*\()?" + re.escape(label) + r"\b", re.M)


def check_invariants(root, problems):
    cited, texts = {}, {}
    for p in code_files(root):
        rel = p.relative_to(root).as_posix()
        texts[rel] = p.read_text(errors="replace")
        for label in labels_in(texts[rel]):
            cited.setdefault(label, rel)
    defined = {}
    for label in sorted(cited):
        pattern = definition_pattern(label)
        where = [rel for rel, text in texts.items() if rel.endswith(".h") and pattern.search(text)]
        if not where:
            problems.append(f"{label} is cited ({cited[label]}) but no header defines it")
        elif len(where) > 1:
            problems.append(f"{label} is defined in more than one header: {', '.join(where)}")
        else:
            defined[label] = where[0]
    index = {}
    arch = (root / "ARCHITECTURE.md").read_text()
    for m in re.finditer(r"^\| ([A-Z]{2,5}-[0-9]+) \| `([^`]+)` \|", arch, re.M):
        if m.group(1) in index:
            problems.append(f"ARCHITECTURE.md lists {m.group(1)} twice")
        index[m.group(1)] = m.group(2)
    for label, rel in sorted(defined.items()):
        if label not in index:
            problems.append(f"{label} (defined in {rel}) is missing from ARCHITECTURE.md's index")
        elif index[label] != rel:
            problems.append(f"ARCHITECTURE.md lists {label} in {index[label]}; it is defined in {rel}")
    for label in sorted(set(index) - set(defined)):
        problems.append(f"ARCHITECTURE.md lists {label}, which no header defines")
    return len(defined)


def cited_paths(text):
    spans = re.findall(r"`([^`\n]+)`", text) + re.findall(r"\]\(([^)#\s]+)\)", text)
    for span in spans:
        for word in span.split():
            word = word.strip(".,;:()'\"")
            if any(c in word for c in "*<>{}$") or "..." in word:
                continue  # a pattern or a placeholder, not a path
            if word.startswith(PATH_ROOTS) or ROOT_FILES.match(word):
                yield word


def check_paths(root, problems):
    count = 0
    for doc in DOCUMENTS:
        for path in sorted(set(cited_paths((root / doc).read_text()))):
            count += 1
            if not (root / path).exists():
                problems.append(f"{doc} cites {path}, which does not exist")
    return count


MARKER = re.compile(r"<!--\s*(example|excerpt|run-by|not-run):\s*(.*?)\s*-->")


def fenced_blocks(text):
    """(marker kind, marker value, block text, line number) per fenced block."""
    lines = text.split("\n")
    i = 0
    while i < len(lines):
        if lines[i].startswith("```"):
            start = i
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            block = "\n".join(lines[start + 1:j]) + "\n"
            marker = None
            k = start - 1
            while k >= 0 and not lines[k].strip():
                k -= 1
            if k >= 0:
                marker = MARKER.fullmatch(lines[k].strip())
            yield (marker.group(1) if marker else None, marker.group(2) if marker else None,
                   block, start + 1)
            i = j + 1
        else:
            i += 1


def is_excerpt(block, text):
    wanted = [l.strip() for l in block.split("\n") if l.strip()]
    have = [l.strip() for l in text.split("\n")]
    at = 0
    for line in wanted:
        while at < len(have) and have[at] != line:
            at += 1
        if at == len(have):
            return False, line
        at += 1
    return True, None


def options_before_separator(block):
    options = set()
    for line in block.split("\n"):
        line = line.split("#", 1)[0] if not line.lstrip().startswith("#SBATCH") else line
        words = line.split()
        if "--" in words:
            words = words[:words.index("--")]
        options |= {w.split("=")[0] for w in words if w.startswith("--") and len(w) > 2}
    return options


def check_readme_blocks(root, problems, not_run):
    count = 0
    for kind, value, block, line in fenced_blocks((root / "README.md").read_text()):
        count += 1
        where = f"README.md line {line}"
        if kind is None:
            problems.append(f"{where}: a code block with no example/excerpt/run-by/not-run marker")
        elif kind == "not-run":
            not_run.append(f"{where}: {value}")
        elif kind in ("example", "excerpt"):
            path = root / value
            if not path.is_file():
                problems.append(f"{where}: {value} does not exist")
            elif kind == "example" and path.read_text() != block:
                problems.append(f"{where}: the block differs from {value}")
            elif kind == "excerpt":
                ok, line_missing = is_excerpt(block, path.read_text())
                if not ok:
                    problems.append(f"{where}: not an excerpt of {value}: {line_missing!r}")
        else:
            tests = [t.strip() for t in value.split(",")]
            missing = [t for t in tests if not (root / t).is_file()]
            if missing:
                problems.append(f"{where}: run-by names missing files {missing}")
                continue
            texts = "\n".join((root / t).read_text() for t in tests)
            for option in sorted(options_before_separator(block)):
                if option not in texts:
                    problems.append(f"{where}: {option} is used by none of {', '.join(tests)}")
    return count


def main():
    root = pathlib.Path(sys.argv[1]).resolve()
    problems, not_run = [], []
    labels = check_invariants(root, problems)
    paths = check_paths(root, problems)
    blocks = check_readme_blocks(root, problems, not_run)
    for line in not_run:
        print(f"not run by any test: {line}")
    for p in problems:
        print(f"FAILED: {p}")
    print(f"docs: {labels} invariants, {paths} cited paths, {blocks} README blocks, "
          f"{len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())

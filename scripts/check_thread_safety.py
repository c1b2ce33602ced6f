#!/usr/bin/env python3
"""Clang's thread-safety analysis over the project's sources: every member marked
ABSL_GUARDED_BY is touched only with its mutex held, and every ...Locked function
(ABSL_EXCLUSIVE_LOCKS_REQUIRED) is called only with it. Compiles each library source of
the build's compile_commands.json with clang++ -fsyntax-only -Wthread-safety (other
warnings off: the g++ build owns those) and exits 1 on any finding. Skips, and says so,
when clang++ is not installed. Run by .ci/run after `make test`.

    scripts/check_thread_safety.py [BUILD_DIR [SOURCE_ROOT]]"""
import concurrent.futures
import json
import os
import shlex
import shutil
import subprocess
import sys

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), ".."))
FOLDERS = ("kernels", "codec", "common", "worker", "server", "inprocess", "python")


def commands(build, root):
    with open(os.path.join(build, "compile_commands.json")) as f:
        entries = json.load(f)
    seen = set()
    for e in entries:
        path = os.path.relpath(os.path.join(e["directory"], e["file"]), root)
        if not path.endswith(".cc") or path.split(os.sep)[0] not in FOLDERS or path in seen:
            continue
        seen.add(path)
        args = shlex.split(e["command"]) if "command" in e else list(e["arguments"])
        out, skip = ["clang++"], False
        for a in args[1:]:
            if skip:
                skip = False
            elif a in ("-o", "-c"):
                skip = a == "-o"
            elif a.startswith("-W") or a in ("-fno-gnu-unique",):
                continue
            else:
                out.append(a)
        out += ["-fsyntax-only", "-Wno-everything", "-Wthread-safety", "-Werror=thread-safety"]
        yield path, e["directory"], out


def check(item):
    path, cwd, cmd = item
    r = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True)
    return path, r.returncode, r.stderr


def main():
    build = sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "build")
    root = os.path.abspath(sys.argv[2]) if len(sys.argv) > 2 else ROOT
    if shutil.which("clang++") is None:
        print("check_thread_safety: clang++ not installed; skipped")
        return 0
    items = list(commands(build, root))
    failed = 0
    with concurrent.futures.ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        for path, rc, err in pool.map(check, items):
            if rc != 0:
                failed += 1
                print(f"{path}:\n{err}")
    if failed:
        print(f"check_thread_safety: {failed} of {len(items)} sources with findings")
        return 1
    print(f"check_thread_safety: {len(items)} sources, no findings")
    return 0


if __name__ == "__main__":
    sys.exit(main())

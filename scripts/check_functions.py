#!/usr/bin/env python3
"""The function-size rule, checked: no function outside tests is longer than 60 lines, from
the line of its opening brace to the line of its closing one (a lambda counts towards the
function that holds it). A small C++ scanner, not a compiler: comments, strings and
preprocessor lines are blanked, then every brace block at namespace or class scope whose
header ends a parameter list is a function. Exits 1 and names each function over the limit
with its file, line and length; run by .ci/run."""
import os
import re
import sys

LIMIT = 60
FOLDERS = ("kernels", "codec", "common", "worker", "server", "inprocess", "python", "bench")
SOURCES = (".h", ".cc", ".cu", ".cuh")
CONTROL = re.compile(r"^\s*(if|for|while|switch|catch|do|else|return)\b")
TRAILER = re.compile(r"\)\s*(const|override|final|noexcept|mutable|volatile|&|&&|\s)*$")
NAME = re.compile(r"(~?[A-Za-z_][\w:<>~]*|operator\s*[^\s(]+)\s*$")


def blank(text):
    """Comments, string and char literals and preprocessor lines become spaces; newlines stay."""
    out, i, n = [], 0, len(text)
    while i < n:
        c = text[i]
        if text.startswith("//", i) or (c == "#" and text[:i].rstrip(" \t").endswith(("\n", ""))
                                         and (i == 0 or text[:i].split("\n")[-1].strip() == "")):
            j = i
            while j < n and text[j] != "\n":
                j += 2 if text[j] == "\\" and j + 1 < n else 1
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith("/*", i):
            j = text.find("*/", i + 2)
            j = n if j < 0 else j + 2
            out.append(re.sub(r"[^\n]", " ", text[i:j]))
            i = j
        elif text.startswith('R"', i):
            m = re.match(r'R"([^(]*)\(', text[i:])
            end = text.find(")" + m.group(1) + '"', i) if m else -1
            j = n if end < 0 else end + len(m.group(1)) + 2
            out.append('""' + re.sub(r"[^\n]", " ", text[i + 2:j]))
            i = j
        elif c in "\"'":
            j = i + 1
            while j < n and text[j] != c and text[j] != "\n":
                j += 2 if text[j] == "\\" else 1
            out.append(c + " " * (j - i - 1) + c)
            i = j + 1
        else:
            out.append(c)
            i += 1
    return "".join(out)


def top_level(header):
    """The header with everything inside parentheses, brackets and angle brackets removed."""
    out, depth = [], 0
    for c in header:
        if c in "([":
            depth += 1
        elif c in ")]":
            depth -= 1
        elif depth == 0:
            out.append(c)
    return "".join(out)


def function_name(header):
    """The declarator's name if the header is a function's signature, else None."""
    h = " ".join(header.split())
    if not h or CONTROL.match(h) or "(" not in h:
        return None
    if re.match(r"^(namespace|class|struct|union|enum|extern)\b", h):
        return None
    if "=" in top_level(h.replace("operator=", "operator_assign")).split(":")[0] \
            and "operator" not in h:
        return None  # a variable's initializer (a lambda at namespace scope counts as data)
    # Drop a constructor's initializer list and a trailing return type.
    sig = re.split(r"\)\s*:(?!:)", h, maxsplit=1)[0] + ")" if re.search(r"\)\s*:(?!:)", h) else h
    sig = re.sub(r"\)\s*->.*$", ")", sig)
    if not TRAILER.search(sig):
        return None
    depth, start = 0, None
    for i in range(len(sig) - 1, -1, -1):  # the parameter list's opening parenthesis
        if sig[i] == ")":
            depth += 1
        elif sig[i] == "(":
            depth -= 1
            if depth == 0:
                start = i
                break
    if start is None:
        return None
    m = NAME.search(sig[:start])
    return m.group(1) if m else None


def functions(text):
    """(name, first line, length in lines) for every function body at namespace/class scope."""
    code = blank(text)
    stack, header_start, found = [], 0, []
    for i, c in enumerate(code):
        if c in ";}" and (not stack or stack[-1][0] == "scope"):
            if c == "}" and stack:
                stack.pop()
            header_start = i + 1
        elif c == "}":
            kind, name, line = stack.pop()
            if kind == "function":
                end = code.count("\n", 0, i) + 1
                found.append((name, line, end - line + 1))
            if not stack or stack[-1][0] == "scope":
                header_start = i + 1
        elif c == "{":
            if stack and stack[-1][0] != "scope":
                stack.append(("block", None, 0))
                continue
            header = code[header_start:i]
            name = function_name(header)
            line = code.count("\n", 0, i) + 1
            if name:
                stack.append(("function", name, line))
            elif "(" in header or "=" in top_level(header):
                stack.append(("block", None, 0))  # an initializer or something unknown
            else:
                stack.append(("scope", None, 0))  # namespace, class, struct, enum, extern
            header_start = i + 1
        elif c == ":" and (not stack or stack[-1][0] == "scope") \
                and re.search(r"\b(public|private|protected)\s*$", code[header_start:i]):
            header_start = i + 1
    return found


def project_files(root):
    for folder in FOLDERS:
        for dirpath, _, names in os.walk(os.path.join(root, folder)):
            for name in sorted(names):
                if name.endswith(SOURCES):
                    yield os.path.relpath(os.path.join(dirpath, name), root)


def check(root, limit=LIMIT):
    errors = []
    for path in sorted(project_files(root)):
        with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
            for name, line, length in functions(f.read()):
                if length > limit:
                    errors.append(f"{path}:{line}: {name} is {length} lines (at most {limit})")
    return errors


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    root = args[0] if args else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    if "--list" in sys.argv:  # every function with its length, longest first
        rows = []
        for path in project_files(root):
            with open(os.path.join(root, path), encoding="utf-8", errors="replace") as f:
                rows += [(length, f"{path}:{line}", name) for name, line, length in functions(f.read())]
        for length, where, name in sorted(rows, reverse=True):
            print(f"{length:5d} {where} {name}")
        return 0
    errors = check(root)
    for e in errors:
        print(e)
    if errors:
        print(f"check_functions: {len(errors)} function(s) over {LIMIT} lines")
        return 1
    print(f"check_functions: every function is at most {LIMIT} lines")
    return 0


if __name__ == "__main__":
    sys.exit(main())

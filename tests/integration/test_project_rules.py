"""The project's own rules, checked the way .ci/run checks them: scripts/check_layers.py
passes on the tree and fails, naming the include, on a tree that breaks the layer rule or
has a cycle inside a folder; scripts/check_functions.py passes on the tree and names a
function over 60 lines, and only such a function; scripts/check_thread_safety.py (clang's
-Wthread-safety) names a guarded member read without its mutex. No file names a work period
(the word stop and a number): history is given by a date or a commit."""
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import unittest

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SCRIPT = os.path.join(ROOT, "scripts", "check_layers.py")
FUNCTIONS = os.path.join(ROOT, "scripts", "check_functions.py")
THREADS = os.path.join(ROOT, "scripts", "check_thread_safety.py")
GUARDED = """#include "absl/base/thread_annotations.h"
#include "absl/synchronization/mutex.h"
class Counter {
 public:
  int Get() { %s return n_; }
 private:
  absl::Mutex mu_;
  int n_ ABSL_GUARDED_BY(mu_) = 0;
};
int Use() { Counter c; return c.Get(); }
"""


def check(root, script=SCRIPT):
    r = subprocess.run([sys.executable, script, root], capture_output=True, text=True)
    return r.returncode, r.stdout


def tree(files):
    d = tempfile.mkdtemp()
    for path, text in files.items():
        os.makedirs(os.path.join(d, os.path.dirname(path)), exist_ok=True)
        with open(os.path.join(d, path), "w") as f:
            f.write(text)
    return d


class ProjectRules(unittest.TestCase):
    def test_the_tree_follows_the_layer_rule(self):
        rc, out = check(ROOT)
        self.assertEqual(rc, 0, out)

    def test_an_include_upwards_or_across_is_named(self):
        rc, out = check(tree({
            "codec/codec.h": '#include "common/log.h"\n',        # upwards
            "worker/client.h": '#include "server/engine.h"\n',   # across peers
            "server/engine.h": '#include "codec/codec.h"\n#include "absl/status/status.h"\n',  # fine
            "common/log.h": "",
        }))
        self.assertEqual(rc, 1, out)
        self.assertIn("codec/codec.h: includes common/log.h", out)
        self.assertIn("worker/client.h: includes server/engine.h", out)
        self.assertNotIn("server/engine.h: includes", out)

    def test_a_cycle_inside_a_folder_is_named(self):
        rc, out = check(tree({
            "common/a.h": "", "common/a.cc": '#include "common/b.h"\n',
            "common/b.h": '#include "common/a.h"\n',
            "common/c.h": '#include "common/a.h"\n',  # an edge, not a cycle
        }))
        self.assertEqual(rc, 1, out)
        self.assertIn("back-edge inside a folder: common/a -> common/b -> common/a", out)
        self.assertNotIn("common/c", out)

    def test_every_function_is_short(self):
        rc, out = check(ROOT, FUNCTIONS)
        self.assertEqual(rc, 0, out)

    def test_a_long_function_is_named(self):
        def body(lines):
            return "".join(f"  x += {i};\n" for i in range(lines))
        rc, out = check(tree({
            # 61 lines from brace to brace: one too many. Braces in strings, comments, a
            # lambda and a nested block must not confuse the count.
            "server/long.cc": "namespace muloco {\nint Long(int x) {\n  const char* s = \"{\";  // }\n"
                              + body(58) + "}\n",
            # 60 lines: fine; a class's inline member and an initializer are not functions.
            "common/ok.cc": "struct S {\n  int F() const {\n" + body(56)
                            + "    auto f = [] { return 1; };\n    return 0;\n  }\n};\n"
                            "int table[] = {\n" + "1,\n" * 80 + "};\n",
        }), FUNCTIONS)
        self.assertEqual(rc, 1, out)
        self.assertIn("server/long.cc:2: Long is 61 lines", out)
        self.assertNotIn("ok.cc", out)

    @unittest.skipIf(shutil.which("clang++") is None, "clang++ not installed")
    def test_a_read_without_its_mutex_is_named(self):
        d = tree({"server/bad.cc": GUARDED % "", "server/good.cc": GUARDED % "absl::MutexLock l(&mu_);"})
        with open(os.path.join(d, "compile_commands.json"), "w") as f:
            json.dump([{"directory": d, "file": name, "command": f"c++ -std=gnu++17 -Wall -c {name} -o x.o"}
                       for name in ("server/bad.cc", "server/good.cc")], f)
        r = subprocess.run([sys.executable, THREADS, d, d], capture_output=True, text=True)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("server/bad.cc", r.stdout)
        self.assertIn("requires holding mutex 'mu_'", r.stdout)
        self.assertNotIn("server/good.cc", r.stdout)

    def test_no_file_names_a_work_period(self):
        period = re.compile(r"\bstop[- ]\d+\b", re.I)
        found = []
        for top, dirs, files in os.walk(ROOT):
            dirs[:] = [d for d in dirs if d not in (".git", "build", "node_modules", "__pycache__")]
            for name in files:
                path = os.path.join(top, name)
                try:
                    with open(path, encoding="utf-8") as f:
                        text = f.read()
                except (UnicodeDecodeError, OSError):
                    continue  # binary: plots, tokenizers, shards
                found += [f"{os.path.relpath(path, ROOT)}: {m.group(0)}" for m in period.finditer(text)]
        self.assertEqual(found, [], "name a date or a commit instead")


if __name__ == "__main__":
    unittest.main()

"""The house's floors, checked on every include (docs/architecture.md):

    plugins -> sdk -> abi
    host: cli, comm, util -> model, data, tokenizer -> checkpoint -> runtime -> plugin
          -> train -> app

A file may include its own floor and the floors below, never one above, and
plugins and the SDK never include the host (they see only the ABI). A new
upward include is a design change: move the code to the floor both users
share instead of reaching up."""
import os
import re
import unittest

SOURCE_DIR = os.environ.get("ACCEL_SOURCE_DIR", os.path.join(os.path.dirname(__file__), "../.."))

HOST_FLOORS = {"cli": 0, "comm": 0, "util": 0, "model": 1, "data": 1, "tokenizer": 1, "checkpoint": 2, "runtime": 3,
               "plugin": 4, "train": 5, "app": 6}
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
SOURCE_SUFFIXES = (".h", ".hpp", ".c", ".cc", ".cpp")


def sources(top):
    for root, _, files in os.walk(os.path.join(SOURCE_DIR, top)):
        for name in files:
            if name.endswith(SOURCE_SUFFIXES):
                path = os.path.join(root, name)
                yield os.path.relpath(path, SOURCE_DIR), open(path, errors="replace").read()


def includes(text):
    return INCLUDE.findall(text)


class Floors(unittest.TestCase):
    def test_host_floors_only_include_downwards(self):
        upward = []
        for path, text in sources("host"):
            parts = path.split(os.sep)
            if len(parts) < 3 or parts[1] not in HOST_FLOORS:
                continue
            mine = HOST_FLOORS[parts[1]]
            for target in includes(text):
                m = re.match(r"host/(\w+)/", target)
                if m and HOST_FLOORS.get(m.group(1), -1) > mine:
                    upward.append(f"{path} includes {target}")
        self.assertEqual(upward, [], "\n".join(upward))

    def test_plugins_and_sdk_see_only_the_abi(self):
        offending = []
        for top in ("plugins", "sdk"):
            for path, text in sources(top):
                offending += [f"{path} includes {t}" for t in includes(text) if t.startswith("host/")]
        self.assertEqual(offending, [], "\n".join(offending))

    def test_the_abi_includes_only_itself(self):
        offending = []
        for path, text in sources("abi"):
            offending += [f"{path} includes {t}" for t in includes(text) if not t.startswith("accel/")]
        self.assertEqual(offending, [], "\n".join(offending))


if __name__ == "__main__":
    unittest.main()

"""The translation units tools/lint.sh gives clang-tidy: every compile command of a compile database
that compiles a source read from standard input, itself or in a CMake unity batch, as an anchored
regular expression (run-clang-tidy's file arguments). Exits non-zero, naming them, if some sources are
compiled by no command.

  git ls-files '*.cc' | python3 tools/lint_units.py ROOT build/compile_commands.json
"""
import json
import os
import re
import sys


def main() -> int:
    root, database = sys.argv[1], sys.argv[2]
    wanted = {line.strip() for line in sys.stdin if line.strip()}
    with open(database, encoding="utf-8") as f:
        entries = json.load(f)
    units, covered = [], set()
    for entry in entries:
        path = os.path.join(entry["directory"], entry["file"])
        if "/Unity/unity_" in path:
            with open(path, encoding="utf-8") as batch:
                members = re.findall(r'^#include "([^"]+)"', batch.read(), re.MULTILINE)
            # Absolute paths, or relative to the batch (CMake's UNITY_BUILD_RELOCATABLE).
            members = [os.path.relpath(os.path.join(os.path.dirname(path), m), root) for m in members]
        else:
            members = [os.path.relpath(path, root)]
        if any(m in wanted for m in members):
            units.append(path)
            covered.update(members)
    missing = sorted(wanted - covered)
    if missing:
        print(f"lint: no command of {database} compiles these (configure with the release preset):",
              *missing, sep="\n  ", file=sys.stderr)
        return 1
    if not units:
        print(f"lint: no command of {database} compiles any of the sources", file=sys.stderr)
        return 1
    # run-clang-tidy takes each argument as a regular expression searched in the database's file names.
    print(*("^" + re.escape(u) + "$" for u in units), sep="\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())

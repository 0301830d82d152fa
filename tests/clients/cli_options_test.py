#!/usr/bin/env python3
"""Every flag of every `lrkv` command comes from an option schema.

`lrkv options` walks the command tree and says where each option was declared:
"schema" (base/option_schema.h, through clients/cli/schema_flags.h), "renamed"
(an old spelling, refused with a hint), "builtin" (CLI11's --help, --version,
the -f option file) or "hand" (a CLI11 declaration of its own). The test fails
on any "hand" option, and on a command tree smaller than the one documented
(so that an empty listing cannot pass).
"""
import json
import subprocess
import sys

lrkv = sys.argv[1]
listing = json.loads(subprocess.run([lrkv, "options"], check=True,
                                    capture_output=True, text=True).stdout)
commands = sorted({row["command"] for row in listing})
by_origin = {}
for row in listing:
    by_origin.setdefault(row["origin"], []).append(row)
hand = by_origin.get("hand", [])
for row in hand:
    print(f"declared by hand, not from a schema: lrkv {row['command']} {row['option']}")
# The commands docs/commands.md documents, the client ones included when built.
expected = {"lrkv", "eval", "generate", "cache", "convert", "verify", "heal", "init",
            "compare", "tokenize", "serve", "bench decode", "bench convert",
            "bench generate", "bench serve", "bench tokenize"}
missing = expected - set(commands)
for name in sorted(missing):
    print(f"command not listed: {name}")
print(f"{len(commands)} commands, {len(listing)} options: " +
      ", ".join(f"{len(v)} {k}" for k, v in sorted(by_origin.items())))
sys.exit(1 if hand or missing else 0)

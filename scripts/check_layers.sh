#!/usr/bin/env bash
# Checks that the layers point one way, by the #include lines of every source folder:
#   base ← kernels ← formats ← tokenizer ← model (a checkpoint opened whole) ← runtime
#   ← exports ← surgery ← verify, train
#   ← study ← service, serve ← clients
# A folder may include its own files and those of the layers below it, never a layer
# above or a peer on its own level (verify and train, service and serve stay apart).
# proto/ holds the public API (the generated lrkv/v1 headers, included by service and
# clients); tests/ and fuzz/ may include anything. Exit 1 naming each include that
# points the wrong way.
#   scripts/check_layers.sh [REPO_ROOT]
set -euo pipefail
root="${1:-$(cd "$(dirname "$0")/.." && pwd)}"
cd "$root"
exec python3 - <<'PY'
import os, re, sys

LEVELS = [['base'], ['kernels'], ['formats'], ['tokenizer'], ['model'], ['runtime'], ['exports'], ['surgery'], ['verify', 'train'],
          ['study'], ['service', 'serve'], ['clients']]
level = {f: i for i, group in enumerate(LEVELS) for f in group}
include = re.compile(r'\s*#\s*include\s+"([A-Za-z_]+)/')
wrong = []
for folder in level:
    for dirpath, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith(('.cc', '.h', '.cu', '.cuh')):
                continue
            path = os.path.join(dirpath, name)
            for number, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
                m = include.match(line)
                if not m or m.group(1) not in level or m.group(1) == folder:
                    continue
                if level[m.group(1)] >= level[folder]:
                    wrong.append(f'{path}:{number}: {folder}/ includes {m.group(1)}/, '
                                 f'{"a peer" if level[m.group(1)] == level[folder] else "above it"}')
for w in wrong:
    print(w)
if wrong:
    sys.exit(1)
print(f'check_layers: {len(level)} folders, every include points down')
PY

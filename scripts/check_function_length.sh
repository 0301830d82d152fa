#!/usr/bin/env bash
# Fails when a function in surgery/, verify/, study/, train/ or serve/ runs over 120 lines
# (DESIGN: a long function is a sign to split). Counts top-level definitions from their
# first line to the closing brace at column 0, the layout .clang-format gives them.
#   scripts/check_function_length.sh [LIMIT]
set -euo pipefail
cd "$(dirname "$0")/.."
limit=${1:-120}
python3 - "$limit" surgery verify study train serve <<'PY'
import os, sys
limit = int(sys.argv[1])
skip = ('#', '//', '}', 'namespace', 'class ', 'struct ', 'enum ', 'using ', 'template',
        'extern', 'static_assert', 'constexpr', 'inline constexpr')
long = []
for folder in sys.argv[2:]:
    for root, _, files in os.walk(folder):
        for name in sorted(files):
            if not name.endswith('.cc'):
                continue
            path = os.path.join(root, name)
            lines = open(path, encoding='utf-8', errors='replace').read().split('\n')
            i = 0
            while i < len(lines):
                line = lines[i]
                if line and not line[0].isspace() and not line.startswith(skip) and '(' in line:
                    j = i
                    while j < len(lines) and '{' not in lines[j] and not lines[j].rstrip().endswith(';'):
                        j += 1
                    if j < len(lines) and '{' in lines[j] and not lines[j].rstrip().endswith(';'):
                        k = j + 1
                        while k < len(lines) and not lines[k].startswith('}'):
                            k += 1
                        if k - i + 1 > limit:
                            long.append(f'{path}:{i + 1}: {k - i + 1} lines: {line.strip()[:70]}')
                        i = k
                i += 1
for entry in long:
    print(entry)
if long:
    print(f'{len(long)} function(s) over {limit} lines: split them', file=sys.stderr)
    sys.exit(1)
print(f'no function in surgery/, verify/, study/, train/ over {limit} lines')
PY

#!/usr/bin/env python3
"""Lengths of the functions of C++ and CUDA sources, found by their braces.

A scanner, not a compiler: comments, string and character literals (raw strings
included) and preprocessor lines are blanked first; then every `{` at namespace or
class scope whose declaration holds a parameter list opens a function body (free
functions, methods defined in class bodies, operators, TEST bodies), except the
braces of a constructor's member initialisers. Lambdas and local classes count as
part of the function they sit in. A function's length runs from the first line of
its declaration to its closing brace.

  scripts/function_lengths.py [--limit N] [--exceptions FILE] PATH...

Prints `path:line: N lines: name` for each function over the limit that the
exceptions file (lines `path name  # reason`) does not list, and exits 1 if there
is any; an exception that no longer matches a long function is reported too, so
the list cannot go stale.
"""
import argparse
import os
import re
import sys

SOURCE_EXTENSIONS = ('.cc', '.h', '.cu', '.cuh', '.cpp', '.hpp')
NOT_FUNCTIONS = re.compile(
    r'^\s*(?:template\s*<.*>\s*)?(?:namespace|class|struct|union|enum|extern\s+"C")\b')


def blank_non_code(text):
    """`text` with comments, literals and preprocessor lines replaced by spaces
    (newlines kept, so line numbers stay)."""
    out = []
    i, n = 0, len(text)
    line_start = True
    while i < n:
        c = text[i]
        if line_start and c == '#':
            # A directive, with its backslash continuations.
            while i < n and not (text[i] == '\n' and text[i - 1] != '\\'):
                out.append('\n' if text[i] == '\n' else ' ')
                i += 1
            continue
        if c == '/' and text.startswith('//', i):
            while i < n and text[i] != '\n':
                out.append(' ')
                i += 1
            continue
        if c == '/' and text.startswith('/*', i):
            end = text.find('*/', i + 2)
            end = n if end < 0 else end + 2
            out.extend('\n' if ch == '\n' else ' ' for ch in text[i:end])
            i = end
            continue
        raw = re.match(r'(?:u8|u|U|L)?R"([^(\s]*)\(', text[i:i + 24])
        if raw and (i == 0 or not (text[i - 1].isalnum() or text[i - 1] == '_')):
            close = ')' + raw.group(1) + '"'
            end = text.find(close, i + raw.end())
            end = n if end < 0 else end + len(close)
            out.extend('\n' if ch == '\n' else ' ' for ch in text[i:end])
            i = end
            continue
        if c in '"\'':
            # A digit separator (1'000) is no literal.
            if c == "'" and i > 0 and text[i - 1].isalnum() and i + 1 < n and text[i + 1].isalnum():
                out.append(' ')
                i += 1
                continue
            j = i + 1
            while j < n and text[j] != c and text[j] != '\n':
                j += 2 if text[j] == '\\' else 1
            out.append(' ' * (min(j + 1, n) - i))
            i = j + 1
            continue
        out.append(c)
        if c == '\n':
            line_start = True
        elif not c.isspace():
            line_start = False
        i += 1
    return ''.join(out)


def matching(code, i):
    """The index of the brace closing the one at `i`."""
    depth = 0
    for j in range(i, len(code)):
        if code[j] == '{':
            depth += 1
        elif code[j] == '}':
            depth -= 1
            if depth == 0:
                return j
    return len(code) - 1


def declaration_name(decl):
    """The function's name in its declaration text: `Suite.Name` for a gtest
    body, else the identifier before the parameter list (attributes such as
    CUDA's `__launch_bounds__(...)` skipped)."""
    test = re.match(r'\s*(?:TEST|TEST_F|TEST_P|TYPED_TEST)\s*\(\s*(\w+)\s*,\s*(\w+)', decl)
    if test:
        return f'{test.group(1)}.{test.group(2)}'
    decl = re.sub(r'(?:__launch_bounds__|__attribute__|alignas|__declspec)\s*\((?:[^()]|\([^()]*\))*\)',
                  ' ', decl)
    head = decl.split('(')[0] if '(' in decl else decl
    m = re.search(r'((?:[A-Za-z_~][\w]*::)*(?:operator\s*\S+|[A-Za-z_~]\w*))\s*$', head.strip())
    return m.group(1) if m else head.strip()[-40:]


def functions(code):
    """(name, first line, last line) of every function body in `code`."""
    found = []

    def scope(begin, end):
        decl_start = begin
        i = begin
        while i < end:
            c = code[i]
            if c in ';}':
                decl_start = i + 1
            elif c == ':' and code[decl_start:i].strip() in ('public', 'private', 'protected'):
                decl_start = i + 1  # an access specifier is no part of what follows
            elif c == '{':
                decl = code[decl_start:i]
                close = matching(code, i)
                stripped = decl.strip()
                if NOT_FUNCTIONS.match(stripped) or '(' not in stripped or stripped.endswith('='):
                    # A namespace or class (its members are scanned), or data.
                    if not stripped.endswith('=') and (NOT_FUNCTIONS.match(stripped) or
                                                       '(' not in stripped):
                        scope(i + 1, close)
                    decl_start = close + 1
                    i = close + 1
                    continue
                # A constructor's member initialiser `x_{...}` after `) :`.
                if re.search(r'\)\s*(?:noexcept\s*)?:(?!:)', decl) and re.search(r'[\w>]\s*$', decl):
                    i = close + 1
                    continue
                first_line = code.count('\n', 0, decl_start + len(decl) - len(decl.lstrip())) + 1
                last_line = code.count('\n', 0, close) + 1
                found.append((declaration_name(decl), first_line, last_line))
                decl_start = close + 1
                i = close + 1
                continue
            i += 1

    scope(0, len(code))
    return found


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--limit', type=int, default=120)
    ap.add_argument('--exceptions', default='')
    ap.add_argument('--list', action='store_true',
                    help='print `line length name` of every function of the files given')
    ap.add_argument('paths', nargs='+')
    args = ap.parse_args()
    if args.list:
        for path in args.paths:
            code = blank_non_code(open(path, encoding='utf-8', errors='replace').read())
            for fn, first, last in functions(code):
                print(first, last - first + 1, fn)
        return 0
    allowed = {}
    if args.exceptions:
        for line in open(args.exceptions, encoding='utf-8'):
            body = line.split('#', 1)[0].split()
            if len(body) >= 2:
                allowed[(body[0], body[1])] = line.strip()
    long, matched, scanned = [], set(), 0
    for top in args.paths:
        walk = [(top, [], [os.path.basename(top)])] if os.path.isfile(top) else os.walk(top)
        for root, dirs, files in walk:
            dirs[:] = sorted(d for d in dirs if not d.startswith(('build', '.', 'node_modules')))
            for name in sorted(files):
                if not name.endswith(SOURCE_EXTENSIONS):
                    continue
                path = os.path.normpath(os.path.join(root, name) if root != top or not os.path.isfile(top) else top)
                code = blank_non_code(open(path, encoding='utf-8', errors='replace').read())
                scanned += 1
                for fn, first, last in functions(code):
                    length = last - first + 1
                    if length <= args.limit:
                        continue
                    if (path, fn) in allowed:
                        matched.add((path, fn))
                        continue
                    long.append(f'{path}:{first}: {length} lines: {fn}')
    stale = [allowed[k] for k in allowed if k not in matched]
    for entry in long:
        print(entry)
    for entry in stale:
        print(f'{args.exceptions}: no longer over {args.limit} lines (remove it): {entry}')
    if long or stale:
        print(f'{len(long)} function(s) over {args.limit} lines not listed as exceptions; '
              f'{len(stale)} stale exception(s)', file=sys.stderr)
        return 1
    print(f'function lengths: {scanned} files, no function over {args.limit} lines '
          f'but the {len(matched)} listed exceptions')
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Finds code outside the K/V kinds' homes that tests a kind: a `switch` over,
or an `==`/`!=` against, a value of KvVariant, KvLayout, RopeMode or DecodeMode
(DecodeMode::kExpanded excepted: the reference engine every layout has, not a
kind), or a kind's name compared as a string. Such a test is a missing method of
the kind (surgery/kv_variant.h, surgery/kv_scheme.h, runtime/kv_layout.h) or of
its traits (RopeModeTraitsOf, DecodeModeTraitsOf).

The homes, where a kind may name itself:
  surgery/variants/, surgery/schemes/   the variant and scheme types
  runtime/layouts/, runtime/*_engine.cc the layout types and their engines
  formats/config.{h,cc}, runtime/decode_engine.{h,cc}
                                        each enum's declaring pair: names,
                                        traits, the stored config's validation
Exceptions outside them: scripts/kv_kind_exceptions.txt, `path: reason`, one per
file. tests/ is not scanned (tests pick kinds on purpose).

  scripts/kv_kind_tests.py [--root DIR] [--list]
Exit 1 naming each test outside the homes and each stale exception.
"""
import argparse
import os
import re
import sys

FOLDERS = ['base', 'kernels', 'formats', 'tokenizer', 'model', 'runtime', 'exports', 'surgery', 'verify', 'train',
           'study', 'service', 'serve', 'clients', 'fuzz']
HOMES = [re.compile(p) for p in (
    r'^surgery/variants/', r'^surgery/schemes/', r'^runtime/layouts/',
    r'^runtime/[a-z_]+_engine\.cc$', r'^formats/config\.(h|cc)$',
    r'^runtime/decode_engine\.(h|cc)$')]
VALUE = r'(?:KvVariant|KvLayout|RopeMode|DecodeMode)::k(?!Expanded\b)\w+'
NAMES = r'"(?:mha|gqa|mqa|mla|lrkv|dense|reconstruct|plane|partial|naive|shared-plane)"'
COMPARE = re.compile(r'(?:[=!]=\s*(?:%s|%s))|(?:(?:%s|%s)\s*[=!]=)' %
                     (VALUE, NAMES, VALUE, NAMES))
CASE = re.compile(r'\bcase\s+' + VALUE + r'\s*:')


def scan(root):
    hits = []
    for folder in FOLDERS:
        for dirpath, _, files in os.walk(os.path.join(root, folder)):
            for name in sorted(files):
                if not name.endswith(('.cc', '.h', '.cu', '.cuh')):
                    continue
                path = os.path.relpath(os.path.join(dirpath, name), root)
                if any(h.search(path) for h in HOMES):
                    continue
                with open(os.path.join(root, path), encoding='utf-8',
                          errors='replace') as f:
                    for number, line in enumerate(f, 1):
                        code = line.split('//', 1)[0]
                        if COMPARE.search(code) or CASE.search(code):
                            hits.append((path, number, line.strip()))
    return hits


def exceptions(root):
    out = {}
    path = os.path.join(root, 'scripts', 'kv_kind_exceptions.txt')
    if os.path.exists(path):
        for line in open(path, encoding='utf-8'):
            line = line.strip()
            if line and not line.startswith('#'):
                file, _, reason = line.partition(':')
                out[file.strip()] = reason.strip()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--root', default=os.path.join(os.path.dirname(__file__), '..'))
    ap.add_argument('--list', action='store_true', help='print every test found')
    a = ap.parse_args()
    hits = scan(a.root)
    allowed = exceptions(a.root)
    bad = [h for h in hits if h[0] not in allowed]
    stale = sorted(set(allowed) - {h[0] for h in hits})
    for path, number, text in (hits if a.list else bad):
        print(f'{path}:{number}: {text}')
    for path in stale:
        print(f'{path}: listed in kv_kind_exceptions.txt but tests no kind any more')
    if bad or stale:
        print(f'{len(bad)} kind test(s) outside the homes; give the kind a method '
              'or trait (scripts/kv_kind_tests.py)', file=sys.stderr)
        return 1
    print(f'kind tests outside the homes: {len(hits)}, each in a listed exception '
          f'({len(allowed)} files)')
    return 0


if __name__ == '__main__':
    sys.exit(main())

#!/usr/bin/env python3
"""Every figure README.md quotes appears in a docs page its paragraph links.

A figure is a number with a decimal point, or a number followed by % or ×
(integers alone are counts and versions, too common to check). A README section
(from one `##` heading to the next) that quotes figures and links docs/X.md must
find each figure, as a whole number, in one of the pages it links: the README
summarises, the page measures. Exit 1 naming each figure found in none.
  scripts/check_readme_figures.py [REPO_ROOT]
"""
import os
import re
import sys

root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), '..')
readme = open(os.path.join(root, 'README.md'), encoding='utf-8').read()
figure = re.compile(r'(?<![\w.])\d[\d,]*\.\d+(?:\s?(?:%|×))?|(?<![\w.])\d[\d,]*\s?(?:%|×)')
missing = []
checked = 0
for para in re.split(r'\n(?=## )', readme):
    links = sorted(set(re.findall(r'\]\((docs/[\w-]+\.md)(?:#[^)]*)?\)', para)))
    if not links:
        continue
    pages = ''.join(open(os.path.join(root, l), encoding='utf-8').read() for l in links)
    pages = pages.replace('\u202f', ' ')
    text = re.sub(r'\]\([^)]*\)', ']', para)
    for f in figure.findall(text):
        number = re.sub(r'\s', '', f)
        checked += 1
        pattern = r'(?<![\w.])' + r'\s?'.join(map(re.escape, number)) + r'(?![\d])'
        if not re.search(pattern, pages):
            missing.append(f'README figure "{f}" is in none of {", ".join(links)}')
for m in missing:
    print(m)
if missing:
    sys.exit(1)
print(f'check_readme_figures: {checked} figures, each found in a page its paragraph links')
